package metrics

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// funcCollector is a collector of fixed families and a collect function.
type funcCollector struct {
	families []*Desc
	collect  func(s *Scrape)
}

func (c funcCollector) Families() []*Desc { return c.families }
func (c funcCollector) Collect(s *Scrape) { c.collect(s) }

// TestWriteOrder checks that Write writes the collectors in order, each
// one's families in the order it lists them (not the order it adds to
// them), leaves out a family without series and hands each its scrape time.
func TestWriteOrder(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	a1 := NewGauge("a_first", "A's first.")
	a2 := NewCounter("a_second_total", "A's second.", "k")
	empty := NewGauge("a_empty", "Never added to.")
	b := NewHistogram("b_seconds", "B's histogram.", "u")
	var seen time.Time
	first := funcCollector{[]*Desc{a1, empty, a2}, func(s *Scrape) {
		s.Add(a2, 2, "y")
		s.Add(a2, 1, "x")
		s.Add(a1, float64(s.Now().Unix()))
		seen = s.Now()
	}}
	second := funcCollector{[]*Desc{b}, func(s *Scrape) {
		s.AddHistogram(b, 0.5, 3, Seconds([]time.Duration{100 * time.Millisecond, time.Second}), []uint64{1, 2}, "q")
	}}
	var buf bytes.Buffer
	if err := Write(&buf, at, first, second); err != nil {
		t.Fatal(err)
	}
	want := `# HELP a_first A's first.
# TYPE a_first gauge
a_first 1.7408304e+09
# HELP a_second_total A's second.
# TYPE a_second_total counter
a_second_total{k="x"} 1
a_second_total{k="y"} 2
# HELP b_seconds B's histogram.
# TYPE b_seconds histogram
b_seconds_bucket{u="q",le="0.1"} 1
b_seconds_bucket{u="q",le="1"} 2
b_seconds_bucket{u="q",le="+Inf"} 3
b_seconds_sum{u="q"} 0.5
b_seconds_count{u="q"} 3
`
	if buf.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", buf.String(), want)
	}
	if !seen.Equal(at) {
		t.Errorf("Scrape.Now = %v, want %v", seen, at)
	}
}

// TestWriteUnlisted checks that a series of a family its collector does not
// list is left out and reported, not written without its place in the order.
func TestWriteUnlisted(t *testing.T) {
	listed := NewGauge("listed", "Listed.")
	stray := NewGauge("stray", "Not listed.")
	c := funcCollector{[]*Desc{listed}, func(s *Scrape) {
		s.Add(listed, 1)
		s.Add(stray, 2)
	}}
	var buf bytes.Buffer
	err := Write(&buf, time.Time{}, c)
	if err == nil || !strings.Contains(err.Error(), "stray") {
		t.Errorf("Write error = %v, want one naming stray", err)
	}
	if want := "# HELP listed Listed.\n# TYPE listed gauge\nlisted 1\n"; buf.String() != want {
		t.Errorf("wrote %q, want %q", buf.String(), want)
	}
}
