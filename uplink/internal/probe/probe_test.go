package probe

import (
	"testing"
	"time"
)

// The pace after each kind of probe: a broker in trouble (a publish
// failed or slow, or the connection down and refusing connects early in
// the outage) is probed again after TroubledEvery; a healthy broker, a
// broker that accepts connects while the MQTT connection is down (the
// connection's own backoff retries it), one down for longer than
// DownFor, and a prober without a connection of its own (TCP or
// HTTP) after the interval.
func TestProberNext(t *testing.T) {
	p := &Prober{interval: 10 * time.Second, TroubledEvery: time.Second}
	for _, c := range []struct {
		name string
		o    probeOutcome
		want time.Duration
	}{
		{"publish answered", probeOutcome{}, 10 * time.Second},
		{"publish troubled", probeOutcome{troubled: true, failed: true}, time.Second},
		{"down, connect refused", probeOutcome{down: true, failed: true}, time.Second},
		{"down, connect refused for a while", probeOutcome{down: true, failed: true, downFor: DownFor - time.Second}, time.Second},
		{"down, connect refused past DownFor", probeOutcome{down: true, failed: true, downFor: DownFor}, 10 * time.Second},
		{"down, connect answered", probeOutcome{down: true}, 10 * time.Second},
		{"no connection of its own, failed", probeOutcome{failed: true}, 10 * time.Second},
	} {
		if got := p.next(c.o); got != c.want {
			t.Errorf("%s: next %v, want %v", c.name, got, c.want)
		}
	}
	p.interval = 500 * time.Millisecond // never slower than the interval
	if got := p.next(probeOutcome{down: true, failed: true}); got != p.interval {
		t.Errorf("interval shorter than TroubledEvery: next %v, want the interval", got)
	}
}
