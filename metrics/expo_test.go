package metrics

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestExpositionRoundTrip writes awkward label values, help texts and
// values and reads them back with the reference parser.
func TestExpositionRoundTrip(t *testing.T) {
	d := &Desc{name: "x_total", help: "back\\slash and\nnewline", typ: counterType, labels: []string{"a", "b"}}
	g := &Desc{name: "y", help: "gauge", typ: gaugeType}
	sm := &Desc{name: "z_seconds", help: "summary", typ: summaryType, labels: []string{"u"}}
	labels := [][]string{
		{`quote"d`, `back\slash`},
		{"new\nline", "ünïcødé 甲烷"},
		{"", "empty first"},
	}
	values := []float64{0, 1e-9, 123456789012}
	s := newScrape(time.Time{})
	for i, l := range labels {
		s.add(d, sample{labels: l, value: values[i]})
	}
	s.add(g, sample{value: math.Inf(1)})
	s.add(sm, sample{labels: []string{"mqtt://a:1883"}, value: 1.5, count: 3})
	var buf bytes.Buffer
	if err := s.write(&buf, []*Desc{d, g, sm}); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("reference parser: %v\n%s", err, text)
	}
	x := mfs["x_total"]
	if x == nil || x.GetHelp() != d.help || x.GetType().String() != "COUNTER" || len(x.GetMetric()) != 3 {
		t.Fatalf("x_total parsed as %v\n%s", x, text)
	}
	found := 0
	for _, m := range x.GetMetric() {
		got := []string{m.GetLabel()[0].GetValue(), m.GetLabel()[1].GetValue()}
		for i, l := range labels {
			if got[0] == l[0] && got[1] == l[1] {
				found++
				if m.GetCounter().GetValue() != values[i] {
					t.Errorf("%q: value %v, want %v", l, m.GetCounter().GetValue(), values[i])
				}
			}
		}
	}
	if found != 3 {
		t.Errorf("label values did not survive the round trip:\n%s", text)
	}
	if v := mfs["y"].GetMetric()[0].GetGauge().GetValue(); !math.IsInf(v, 1) {
		t.Errorf("y = %v, want +Inf", v)
	}
	z := mfs["z_seconds"].GetMetric()[0].GetSummary()
	if z.GetSampleSum() != 1.5 || z.GetSampleCount() != 3 {
		t.Errorf("z_seconds = sum %v count %v, want 1.5 and 3", z.GetSampleSum(), z.GetSampleCount())
	}
}

// TestScrapeRejects checks that a series with an invalid label value or
// the wrong number of labels is left out and reported.
func TestScrapeRejects(t *testing.T) {
	d := &Desc{name: "x", help: "h", typ: gaugeType, labels: []string{"a"}}
	s := newScrape(time.Time{})
	s.add(d, sample{labels: []string{"bad\xff"}})
	s.add(d, sample{labels: []string{"a", "b"}})
	s.add(d, sample{labels: []string{"good"}, value: 2})
	var buf bytes.Buffer
	err := s.write(&buf, []*Desc{d})
	if err == nil || !strings.Contains(err.Error(), "not valid UTF-8") || !strings.Contains(err.Error(), "2 label values for 1 labels") {
		t.Errorf("write error = %v", err)
	}
	if want := "# HELP x h\n# TYPE x gauge\nx{a=\"good\"} 2\n"; buf.String() != want {
		t.Errorf("wrote %q, want %q", buf.String(), want)
	}
}
