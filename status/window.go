package status

import "time"

// The rates the page shows (a bus's utilisation, an upstream's share of
// the deliveries) are over the last minute or so: the counters are sampled
// at most every windowStep as the page is viewed, and a rate is taken from
// the oldest sample within windowSpan. Nothing is sampled while nobody
// looks.
const (
	windowStep = 5 * time.Second
	windowSpan = time.Minute
)

// sample is the counters behind the rates at one time.
type sample struct {
	at        time.Time
	busy      map[string]time.Duration // by bus
	delivered map[string]uint64        // by upstream
}

// window keeps the samples of the last windowSpan, oldest first. The
// server's mutex guards it.
type window struct {
	samples []sample
}

// add records the counters at now, and returns the base of the rates: the
// oldest sample within windowSpan, or, when there is none at least
// windowStep old, a sample at now without counters (the rates are then
// taken since the start).
func (w *window) add(now time.Time, busy map[string]time.Duration, delivered map[string]uint64) *sample {
	keep := w.samples[:0]
	for _, s := range w.samples {
		if now.Sub(s.at) <= windowSpan && !s.at.After(now) {
			keep = append(keep, s)
		}
	}
	w.samples = keep
	base := &sample{at: now}
	if len(w.samples) > 0 && now.Sub(w.samples[0].at) >= windowStep {
		first := w.samples[0]
		base = &first
	}
	if n := len(w.samples); n == 0 || now.Sub(w.samples[n-1].at) >= windowStep {
		w.samples = append(w.samples, sample{at: now, busy: busy, delivered: delivered})
	}
	return base
}
