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

// desc describes one metric family.
type desc struct {
	name   string
	help   string
	typ    metricType
	labels []string
}

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

// scrape gathers the samples of one scrape, family by family.
type scrape struct {
	samples map[*desc][]sample
	errs    []error
}

func newScrape() *scrape { return &scrape{samples: map[*desc][]sample{}} }

// add records one series. A label value that is not UTF-8 fails its own
// series only: it is left out and reported as an error of the scrape.
func (s *scrape) add(d *desc, sm sample) {
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
func (s *scrape) write(w io.Writer, families []*desc) error {
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
