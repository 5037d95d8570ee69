package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestAccount checks the reckoning on a made-up run: a produced packet
// that no broker received and the buffer does not hold is missing; one in
// the buffer is left; receipts beyond the first are duplicates; a packet
// seen but never printed is unconfirmed; a seq nothing showed is refused.
func TestAccount(t *testing.T) {
	l := newLedger(gatewayID, 3)
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	pkt := func(seq int, epoch string) []byte {
		return fmt.Appendf(nil, `{"DataHead":{"Date":"2026-11-29","Time":"08:00:00","FarmId":"CHAOS","DataType":"Wind","GatewayId":"gw-chaos","DeviceId":"wind-1","Seq":%d,"TS":"2026-11-29T08:00:00Z","Epoch":"%s"},"DataBody":{"WindSpeed":"%d"}}`, seq, epoch, seq)
	}
	for _, s := range []int{1, 2, 3, 4, 6} {
		l.stored(pkt(s, "000000e1"), 1, t0.Add(time.Duration(s)*time.Second))
	}
	// 7 was committed, then the gateway was killed before printing it.
	l.received(0, "fieldlink/CHAOS/gw-chaos/Wind", pkt(1, "000000e1"), t0.Add(2*time.Second))
	l.received(1, "fieldlink/CHAOS/gw-chaos/Wind", pkt(1, "000000e1"), t0.Add(3*time.Second))
	l.received(2, "fieldlink/CHAOS/gw-chaos/Wind", pkt(2, "000000e1"), t0.Add(12*time.Second))
	l.received(2, "fieldlink/CHAOS/gw-chaos/Wind", pkt(7, "000000e1"), t0.Add(13*time.Second))
	l.received(0, "fieldlink/CHAOS/gw-chaos/status", []byte("offline"), t0)
	// A packet the buffer refused, printed anyway: no epoch.
	l.stored([]byte(`{"DataHead":{"Date":"2026-11-29","Time":"08:00:00","FarmId":"CHAOS","DataType":"Wind","GatewayId":"gw-chaos","DeviceId":"wind-1","Seq":5,"TS":"2026-11-29T08:00:00Z"},"DataBody":{"WindSpeed":"5"}}`), 1, t0)

	a := l.account(map[key]bool{{"000000e1", 3}: true})
	if want := []key{{"000000e1", 4}, {"000000e1", 6}}; !slices.Equal(a.missing, want) {
		t.Errorf("missing %v, want %v", a.missing, want)
	}
	got := fmt.Sprintf("produced=%d delivered=%d left=%d unconfirmed=%d duplicates=%d refused=%d phantom=%d longest=%v problems=%q",
		a.produced, a.delivered, a.left, a.unconfirmed, a.duplicates, a.refused, a.phantom, a.longest, a.problems)
	want := `produced=5 delivered=2 left=1 unconfirmed=1 duplicates=1 refused=1 phantom=1 longest=10s problems=[]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}

	// The same seq delivered with another content is a reused seq.
	l.received(0, "fieldlink/CHAOS/gw-chaos/Wind", []byte(`{"DataHead":{"Date":"2026-11-29","Time":"08:00:01","FarmId":"CHAOS","DataType":"Wind","GatewayId":"gw-chaos","DeviceId":"wind-1","Seq":4,"TS":"2026-11-29T08:00:01Z","Epoch":"000000e1"},"DataBody":{"WindSpeed":"9"}}`), t0)
	if a := l.account(nil); len(a.problems) != 1 {
		t.Errorf("a delivered packet unlike the stored one under its seq: problems %q, want one", a.problems)
	}
}

// TestPlan checks that every schedule holds every available kind at least
// once, inside the phase, and is the same for the same seed.
func TestPlan(t *testing.T) {
	for seed := range uint64(50) {
		for _, d := range []time.Duration{20 * time.Second, shortDuration, 10 * time.Minute} {
			p := plan(rand.New(rand.NewPCG(seed, 1)), d, kinds)
			q := plan(rand.New(rand.NewPCG(seed, 1)), d, kinds)
			if !slices.EqualFunc(p, q, func(a, b fault) bool { return a.String() == b.String() }) {
				t.Fatalf("seed %d: two schedules for one seed", seed)
			}
			seen := map[kind]int{}
			for _, f := range p {
				seen[f.kind]++
				if f.at < 0 || f.at >= d || f.dur <= 0 {
					t.Fatalf("seed %d, %v: fault %v outside the phase", seed, d, f)
				}
			}
			for _, k := range kinds {
				if seen[k] == 0 {
					t.Fatalf("seed %d, %v: no %s in %v", seed, d, k, p)
				}
			}
		}
	}
}
