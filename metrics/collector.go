package metrics

import (
	"io"
	"slices"
	"time"
)

// A Collector is a component's metrics: the families it owns, described
// once beside the statistics they expose, and at each scrape their series,
// read from one snapshot of those statistics. The component declares it and
// the composition root lists it; package metrics knows none of them.
type Collector interface {
	// Families are the families Collect may add series to, in the order
	// /metrics writes them. A family without series in a scrape is left
	// out of it.
	Families() []*Desc
	// Collect adds the series of one scrape. It may be called from several
	// scrapes at once.
	Collect(s *Scrape)
}

// Write collects cs once, at now, and writes their families to w in the
// text exposition format: the collectors in order, each one's families in
// the order it lists them, a family's series sorted by label values. A
// series it cannot write (a label value that is not UTF-8, the wrong
// number of labels, a family its collector does not list) is left out and
// reported in the error; the others are written.
func Write(w io.Writer, now time.Time, cs ...Collector) error {
	s := newScrape(now)
	var families []*Desc
	for _, c := range cs {
		c.Collect(s)
		families = append(families, c.Families()...)
	}
	return s.write(w, families)
}

// Seconds are durations in seconds: a histogram's bounds from the
// durations its owner keeps its buckets by.
func Seconds(ds []time.Duration) []float64 {
	b := make([]float64, len(ds))
	for i, d := range ds {
		b[i] = d.Seconds()
	}
	return slices.Clip(b)
}

// Bool is 1 for true and 0 for false: an enum's or a flag's gauge.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// UnixSeconds is t in Unix seconds, 0 for the zero time.
func UnixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
