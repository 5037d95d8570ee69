package metrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The gateway writes the Prometheus text exposition format (version 0.0.4)
// itself. The reference client library links the protobuf runtime, which
// the linker cannot prune and which alone added 3.9 MiB to a 9 MiB ARM
// binary; the text format is small and stable, and the tests hold this
// writer to the reference parser and linter (github.com/prometheus/common
// and client_golang's testutil, test-only dependencies).

// contentType is the text exposition format's media type.
const contentType = "text/plain; version=0.0.4; charset=utf-8"

// metricType is a family's TYPE.
type metricType string

const (
	counterType   metricType = "counter"
	gaugeType     metricType = "gauge"
	summaryType   metricType = "summary" // _sum and _count only, no quantiles
	histogramType metricType = "histogram"
)

// Desc describes one metric family: its name, HELP text, TYPE and label
// names. A component makes its own with [NewCounter], [NewGauge] and
// [NewHistogram], once, and lists them in its [Collector]'s Families.
type Desc struct {
	name   string
	help   string
	typ    metricType
	labels []string
}

// NewCounter describes a counter; its name ends in _total.
func NewCounter(name, help string, labels ...string) *Desc {
	return newDesc(name, help, counterType, labels)
}

// NewGauge describes a gauge.
func NewGauge(name, help string, labels ...string) *Desc {
	return newDesc(name, help, gaugeType, labels)
}

// NewHistogram describes a histogram; its series are added with
// [Scrape.AddHistogram], and the le label is the writer's.
func NewHistogram(name, help string, labels ...string) *Desc {
	return newDesc(name, help, histogramType, labels)
}

// newDesc is not inlined: the components call the constructors above for
// every metric, once at start, and an inlined copy in each call costs the
// ARM field binary tens of kilobytes.
//
//go:noinline
func newDesc(name, help string, typ metricType, labels []string) *Desc {
	return &Desc{name: name, help: help, typ: typ, labels: labels}
}

// Name is the family's name.
func (d *Desc) Name() string { return d.name }

// sample is one series of a family at scrape time. For a summary or a
// histogram, value is the sum and count the count; a histogram's bucket i
// holds cum[i] observations at most bounds[i].
type sample struct {
	labels []string
	value  float64
	count  uint64
	bounds []float64
	cum    []uint64
}

// Scrape gathers the samples of one scrape, family by family: the
// collectors add their series to it, and it writes them in the order of
// the collectors' families.
type Scrape struct {
	now     time.Time
	samples map[*Desc][]sample
	errs    []error
}

func newScrape(now time.Time) *Scrape { return &Scrape{now: now, samples: map[*Desc][]sample{}} }

// Now is the time of the scrape: what an age or a reading is taken at.
func (s *Scrape) Now() time.Time { return s.now }

// Add adds one series of a counter or a gauge, its label values in the
// order of d's labels.
func (s *Scrape) Add(d *Desc, v float64, labels ...string) {
	s.add(d, sample{labels: labels, value: v})
}

// AddHistogram adds one series of a histogram: sum and count of its
// observations, and cum[i] observations at most bounds[i] (cumulative).
func (s *Scrape) AddHistogram(d *Desc, sum float64, count uint64, bounds []float64, cum []uint64, labels ...string) {
	s.add(d, sample{labels: labels, value: sum, count: count, bounds: bounds, cum: cum})
}

// add records one series. A label value that is not UTF-8 fails its own
// series only: it is left out and reported as an error of the scrape.
func (s *Scrape) add(d *Desc, sm sample) {
	if len(sm.labels) != len(d.labels) {
		s.errs = append(s.errs, fmt.Errorf("metrics: %s: %d label values for %d labels", d.name, len(sm.labels), len(d.labels)))
		return
	}
	for _, v := range sm.labels {
		if !utf8.ValidString(v) {
			s.errs = append(s.errs, fmt.Errorf("metrics: %s: label value %q is not valid UTF-8", d.name, v))
			return
		}
	}
	s.samples[d] = append(s.samples[d], sm)
}

// write writes the families in order, each with its HELP and TYPE and its
// series sorted by label values; a family without series is left out.
func (s *Scrape) write(w io.Writer, families []*Desc) error {
	if len(s.samples) > 0 {
		listed := make(map[*Desc]bool, len(families))
		for _, d := range families {
			listed[d] = true
		}
		for d := range s.samples {
			if !listed[d] {
				s.errs = append(s.errs, fmt.Errorf("metrics: %s: a series of a family its collector does not list", d.name))
			}
		}
	}
	bw := bufio.NewWriter(w)
	for _, d := range families {
		ss := s.samples[d]
		if len(ss) == 0 {
			continue
		}
		slices.SortStableFunc(ss, func(a, b sample) int { return slices.Compare(a.labels, b.labels) })
		bw.WriteString("# HELP ")
		bw.WriteString(d.name)
		bw.WriteByte(' ')
		bw.WriteString(helpEscaper.Replace(d.help))
		bw.WriteString("\n# TYPE ")
		bw.WriteString(d.name)
		bw.WriteByte(' ')
		bw.WriteString(string(d.typ))
		bw.WriteByte('\n')
		for _, sm := range ss {
			if d.typ == histogramType {
				lnames := append(slices.Clip(d.labels), "le")
				for i, b := range sm.bounds {
					writeSeries(bw, d.name+"_bucket", lnames, append(slices.Clip(sm.labels), formatFloat(b)), float64(sm.cum[i]))
				}
				writeSeries(bw, d.name+"_bucket", lnames, append(slices.Clip(sm.labels), "+Inf"), float64(sm.count))
			}
			if d.typ == summaryType || d.typ == histogramType {
				writeSeries(bw, d.name+"_sum", d.labels, sm.labels, sm.value)
				writeSeries(bw, d.name+"_count", d.labels, sm.labels, float64(sm.count))
				continue
			}
			writeSeries(bw, d.name, d.labels, sm.labels, sm.value)
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return errors.Join(s.errs...)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func writeSeries(w *bufio.Writer, name string, labels, values []string, v float64) {
	w.WriteString(name)
	if len(labels) > 0 {
		w.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(l)
			w.WriteString(`="`)
			w.WriteString(labelEscaper.Replace(values[i]))
			w.WriteByte('"')
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

// formatFloat writes v as the reference encoder does.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
