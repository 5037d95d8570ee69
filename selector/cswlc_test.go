package selector

import (
	"math"
	"slices"
	"testing"
	"time"
)

// cswlcLoads are the loads of the hand-computed cases, K = {.3 .2 .2 .2 .1},
// largest capacities E 3200, M 16384, N 1000 and process count 200:
//
//	u0: e=1  m=1  n=1  H = .3+.2+.2+.2+.1              = 1
//	    H' = .3·.5 + .2·.25 + .2·.1 + .2·.2 + .1·(100/200) = .31,  G = .31
//	u1: e=.5 m=.5 n=1  H = .15+.1+.2+.2+.1             = .75
//	    H' = .3·.5·.9 + .2·.5·.5 + .2·.3 + .2·.6 + .1·1 = .465, G = .62
//	u2: e=1  m=.5 n=.1 H = .3+.1+.2+.02+.1             = .72
//	    H' = .3·.1 + .2·.5·.1 + .2·.1 + .2·.1·.1 + .1·.25 = .087, G = .120833…
//	u3: as u2 with CPU .3: H' = .147, G = .204166…
var cswlcLoads = []Load{
	{CPUMHz: 3200, MemoryMB: 16384, BandwidthMbps: 1000, CPU: 0.5, Memory: 0.25, DiskIO: 0.1, Network: 0.2, Processes: 100},
	{CPUMHz: 1600, MemoryMB: 8192, BandwidthMbps: 1000, CPU: 0.9, Memory: 0.5, DiskIO: 0.3, Network: 0.6, Processes: 200},
	{CPUMHz: 3200, MemoryMB: 8192, BandwidthMbps: 100, CPU: 0.1, Memory: 0.1, DiskIO: 0.1, Network: 0.1, Processes: 50},
	{CPUMHz: 3200, MemoryMB: 8192, BandwidthMbps: 100, CPU: 0.3, Memory: 0.1, DiskIO: 0.1, Network: 0.1, Processes: 50},
}

func cswlcNear(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestCSWLCUtilisation(t *testing.T) {
	var loads [MaxUpstreams]Load
	copy(loads[:], cswlcLoads)
	var h, g [MaxUpstreams]float64
	k := cswlcWeights([5]float64{})
	cswlcUtilisation(&k, &loads, 0b1111, 0, &h, &g)
	wantH := []float64{1, 0.75, 0.72, 0.72}
	wantG := []float64{0.31, 0.62, 0.087 / 0.72, 0.147 / 0.72}
	for i := range 4 {
		if !cswlcNear(h[i], wantH[i]) || !cswlcNear(g[i], wantG[i]) {
			t.Errorf("u%d: H = %v, G = %v; want %v, %v", i, h[i], g[i], wantH[i], wantG[i])
		}
	}

	// A process limit of 400 halves every process use: u0's H' = .31 − .025.
	cswlcUtilisation(&k, &loads, 0b1111, 400, &h, &g)
	if !cswlcNear(g[0], 0.285) {
		t.Errorf("ProcessLimit 400: u0 G = %v, want .285", g[0])
	}

	// Capacities nobody reports are equal: G is the K-weighted mean of the
	// utilisations, .3·.5 + .2·.5 + .2·.5 + .2·.5 + .1·(10/10) = .55.
	var bare [MaxUpstreams]Load
	bare[0] = Load{CPU: 0.5, Memory: 0.5, DiskIO: 0.5, Network: 0.5, Processes: 10}
	cswlcUtilisation(&k, &bare, 1, 0, &h, &g)
	if !cswlcNear(h[0], 1) || !cswlcNear(g[0], 0.55) {
		t.Errorf("no capacities: H = %v, G = %v; want 1, .55", h[0], g[0])
	}

	// K is scaled to sum 1; the scanned text's 6.3 would not be.
	if got := cswlcWeights([5]float64{3, 2, 2, 2, 1}); !cswlcNear(got[0], 0.3) || !cswlcNear(got[4], 0.1) {
		t.Errorf("K {3 2 2 2 1} scaled: %v", got)
	}
}

func TestCSWLCBuckets(t *testing.T) {
	th := cswlcThresholds(nil)
	if !slices.Equal(th, []float64{0.25, 0.5, 0.75, 1}) {
		t.Fatalf("default thresholds %v", th)
	}
	for _, c := range []struct {
		g    float64
		want int
	}{{0, 0}, {0.25, 0}, {0.2500001, 1}, {0.5, 1}, {0.62, 2}, {0.75, 2}, {0.9, 3}, {1, 3}} {
		if got := cswlcBucket(c.g, th); got != c.want {
			t.Errorf("G %v: bucket %d, want %d", c.g, got, c.want)
		}
	}
	if got := cswlcThresholds([]float64{0.8, 0.4, 0.4, -1, 2}); !slices.Equal(got, []float64{0.4, 0.8, 1}) {
		t.Errorf("thresholds {.8 .4 .4 −1 2} → %v, want [.4 .8 1]", got)
	}
}

// cswlcTable returns a table of the loads, all reported now.
func cswlcTable(loads ...Load) (*Table, *testClock) {
	tb, c := newTestTable(make([]int, len(loads))...)
	for i, l := range loads {
		tb.Report(i, l)
	}
	return tb, c
}

// TestCSWLCPick: u2 and u3 share bucket 0 (G ≤ .25), u0 is in bucket 1,
// u1 in bucket 2. The cuckoo search keeps u2, the less used of bucket 0
// (u3 is .083 worse, beyond the .02 tolerance), so the set is {u0, u1,
// u2}. With W = weight·H (no delivery has ended, so no usage factor) and
// in flight 2, 3, 1, 0: C/W = 2/1, 3/.75, 1/.72, (0/.72) → u2, where plain
// WLC would take u3. With u2 skipped, u0 (2 < 4).
func TestCSWLCPick(t *testing.T) {
	tb, _ := cswlcTable(cswlcLoads...)
	for i, n := range []int{2, 3, 1, 0} {
		for range n {
			tb.Begin(i)
		}
	}
	s := newCSWLC(cswlcOptions{})
	for range 20 {
		if i, _ := s.Pick(tb, 0); i != 2 {
			t.Fatalf("picked u%d, want u2", i)
		}
	}
	if set := s.ref.published().set.Load(); set != 0b0111 {
		t.Fatalf("candidate set %#b, want 0b111", set)
	}
	for i, want := range []float64{1, 0.75, 0.72, 0.72} {
		if w := math.Float64frombits(s.ref.published().w[i].Load()); !cswlcNear(w, want) {
			t.Errorf("W_%d = %v, want %v", i, w, want)
		}
	}
	if i, _ := s.Pick(tb, 1<<2); i != 0 {
		t.Fatalf("u2 skipped: picked u%d, want u0", i)
	}
	// Every set member skipped: WLC over the rest, u3.
	if i, _ := s.Pick(tb, 0b0111); i != 3 {
		t.Fatalf("u0, u1, u2 skipped: picked u%d, want u3", i)
	}
	if f := s.Fallbacks(); f != 0 {
		t.Fatalf("%d fallbacks with every load fresh", f)
	}
	if leastConn, _ := (leastConn{}).Pick(tb, 0); leastConn != 3 {
		t.Fatalf("least_conn picks u%d, want u3", leastConn)
	}

	// A wide tolerance keeps u3 in the set, and it has nothing in flight.
	s = newCSWLC(cswlcOptions{Tolerance: 0.1})
	if i, _ := s.Pick(tb, 0); i != 3 {
		t.Fatalf("tolerance .1: picked u%d, want u3", i)
	}
}

// TestCSWLCUsage: W_s = weight·H·(1 + φ_s), φ the share of the deliveries
// that ended in the last period. u0 and u1 alike (H = 1), weights 2 and 1;
// 3 deliveries end at u0 and 1 at u1: W = 2·1.75 = 3.5 and 1·1.25.
func TestCSWLCUsage(t *testing.T) {
	l := Load{CPU: 0.5}
	tb, c := newTestTable(2, 1)
	tb.Report(0, l)
	tb.Report(1, l)
	s := newCSWLC(cswlcOptions{})
	s.Pick(tb, 0)
	feed(tb, c, 0, 3, time.Millisecond, time.Millisecond, nil)
	feed(tb, c, 1, 1, time.Millisecond, time.Millisecond, nil)
	c.Advance(time.Second)
	tb.Probe(0, time.Millisecond, nil) // a clock reading for the table
	s.Pick(tb, 0)
	if w0, w1 := math.Float64frombits(s.ref.published().w[0].Load()), math.Float64frombits(s.ref.published().w[1].Load()); !cswlcNear(w0, 3.5) || !cswlcNear(w1, 1.25) {
		t.Fatalf("W = %v, %v; want 3.5, 1.25", w0, w1)
	}
	s = newCSWLC(cswlcOptions{IgnoreUsage: true})
	s.Pick(tb, 0)
	if w0 := math.Float64frombits(s.ref.published().w[0].Load()); !cswlcNear(w0, 2) {
		t.Fatalf("IgnoreUsage: W_0 = %v, want 2", w0)
	}
}

// cswlcFallbacker is a strategy that counts its fallbacks.
type cswlcFallbacker interface {
	Strategy
	Fallbacks() uint64
}

// TestCSWLCIRLBFallback: with no fresh report for a candidate, cswlc and irlb
// pick as least_conn and count it.
func TestCSWLCIRLBFallback(t *testing.T) {
	for _, mk := range []func() cswlcFallbacker{
		func() cswlcFallbacker { return newCSWLC(cswlcOptions{}) },
		func() cswlcFallbacker { return newIRLB(irlbOptions{}) },
	} {
		name := mk().Name()
		// No report at all: least_conn, u1 has the fewest in flight.
		tb, c := newTestTable(1, 1, 1)
		tb.Begin(0)
		tb.Begin(2)
		s := mk()
		for range 5 {
			if i, _ := s.Pick(tb, 0); i != 1 {
				t.Fatalf("%s, no reports: picked u%d, want u1 (least_conn)", name, i)
			}
		}
		if f := s.Fallbacks(); f != 5 {
			t.Fatalf("%s, no reports: %d fallbacks, want 5", name, f)
		}
		// One candidate: nothing to compare, not a fallback.
		if i, _ := s.Pick(tb, 0b101); i != 1 || s.Fallbacks() != 5 {
			t.Fatalf("%s, one candidate: picked u%d, %d fallbacks", name, i, s.Fallbacks())
		}

		// Every upstream reports: no fallback. u1 is the least loaded too.
		heavy, light := Load{CPU: 0.9, Memory: 0.9, Network: 0.9, DiskIO: 0.9}, Load{CPU: 0.1, Memory: 0.1, Network: 0.1}
		for i := range 3 {
			tb.Report(i, heavy)
		}
		tb.Report(1, light)
		c.Advance(2 * time.Second)
		tb.Probe(0, time.Millisecond, nil)
		if i, _ := s.Pick(tb, 0); i != 1 || s.Fallbacks() != 5 {
			t.Fatalf("%s, fresh reports: picked u%d, %d fallbacks (want u1, 5)", name, i, s.Fallbacks())
		}

		// One report goes stale (LoadTTL 30 s): fallback, before and after
		// the next recomputation.
		c.Advance(20 * time.Second)
		tb.Report(0, heavy)
		tb.Report(1, light)
		c.Advance(15 * time.Second) // u2's report is 37 s old
		tb.Probe(0, time.Millisecond, nil)
		if _, ok := s.Pick(tb, 0); !ok || s.Fallbacks() != 6 {
			t.Fatalf("%s, u2 stale: %d fallbacks, want 6", name, s.Fallbacks())
		}
		if i, _ := s.Pick(tb, 1<<2); i != 1 || s.Fallbacks() != 6 {
			t.Fatalf("%s, stale u2 skipped: picked u%d, %d fallbacks (want u1, 6)", name, i, s.Fallbacks())
		}
		// Stale between recomputations (every 1 s): the published expiry
		// says so.
		for i := range 3 {
			tb.Report(i, heavy)
		}
		c.Advance(29500 * time.Millisecond)
		tb.Probe(0, time.Millisecond, nil)
		before := s.Fallbacks()
		if _, ok := s.Pick(tb, 0); !ok || s.Fallbacks() != before {
			t.Fatalf("%s: reports 29.5 s old: a fallback", name)
		}
		c.Advance(600 * time.Millisecond) // 30.1 s old, 0.6 s after the recomputation
		tb.Probe(0, time.Millisecond, nil)
		if _, ok := s.Pick(tb, 0); !ok || s.Fallbacks() != before+1 {
			t.Fatalf("%s: stale since the last recomputation, not a fallback", name)
		}
	}
}

// TestCSWLCIRLBNoAlloc checks that Pick does not allocate on the path
// that uses the reports (the conformance suite has no reports).
func TestCSWLCIRLBNoAlloc(t *testing.T) {
	for _, s := range []cswlcFallbacker{newCSWLC(cswlcOptions{}), newIRLB(irlbOptions{})} {
		tb, c := newTestTable(1, 2, 3, 1, 2, 3, 1, 2)
		for i := range tb.Len() {
			tb.Report(i, Load{CPU: float64(i) / 10, Memory: 0.3, Network: 0.2, CPUMHz: 2000 + 100*float64(i), Connections: i})
		}
		for n := range 100 {
			i, _ := s.Pick(tb, 0)
			tk := tb.Begin(i)
			c.Advance(time.Duration(n%7) * time.Millisecond)
			tb.End(tk, nil)
		}
		c.Advance(2 * time.Second)
		tb.Probe(0, time.Millisecond, nil)
		s.Pick(tb, 0)
		if a := testing.AllocsPerRun(1000, func() { s.Pick(tb, 1<<3) }); a != 0 {
			t.Errorf("%s: Pick allocates %.1f times per call", s.Name(), a)
		}
		if f := s.Fallbacks(); f != 0 {
			t.Errorf("%s: %d fallbacks with every report fresh", s.Name(), f)
		}
	}
}

// TestCSWLCIRLBSpread: upstreams alike, all reporting the same load, share
// the deliveries (within half of the fair share either way), with one and
// with eight deliveries in flight, and without falling back.
func TestCSWLCIRLBSpread(t *testing.T) {
	for _, mk := range []func() cswlcFallbacker{
		func() cswlcFallbacker { return newCSWLC(cswlcOptions{}) },
		func() cswlcFallbacker { return newIRLB(irlbOptions{}) },
	} {
		for _, depth := range []int{1, 8} {
			s := mk()
			tb, c := newTestTable(1, 1, 1, 1, 1)
			l := Load{CPU: 0.4, Memory: 0.3, Network: 0.2, CPUMHz: 2400, Connections: 20}
			counts := make([]int, 5)
			var inflight []Ticket
			for n := range 3000 {
				if n%100 == 0 {
					for i := range 5 {
						tb.Report(i, l)
					}
				}
				i, _ := s.Pick(tb, 0)
				counts[i]++
				inflight = append(inflight, tb.Begin(i))
				c.Advance(10 * time.Millisecond / time.Duration(depth))
				if len(inflight) == depth {
					tb.End(inflight[0], nil)
					inflight = inflight[1:]
				}
			}
			for i, n := range counts {
				if n < 300 || n > 900 {
					t.Errorf("%s, %d in flight: u%d got %d of 3000: %v", s.Name(), depth, i, n, counts)
					break
				}
			}
			if f := s.Fallbacks(); f != 0 {
				t.Errorf("%s: %d fallbacks", s.Name(), f)
			}
		}
	}
}
