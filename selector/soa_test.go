package selector

import (
	"context"
	"testing"
	"time"
)

func TestSOAHistoryByHand(t *testing.T) {
	ms := float64(time.Millisecond)
	// Latencies 10, 20, 30 ms, oldest first, weights 1, 2, 3:
	// m = (10 + 40 + 90)/6 = 23.333 ms;
	// σ² = (1·13.333² + 2·3.333² + 3·6.667²)/6 = 333.33/6 = 55.556, σ = 7.4536 ms.
	m, sd := soaHistory([]int64{10e6, 20e6, 30e6}, 0, 3, 100*ms)
	if !near(m/ms, 23.3333, 1e-4) || !near(sd/ms, 7.4536, 1e-4) {
		t.Fatalf("m, σ = %.4f, %.4f ms; want 23.3333, 7.4536", m/ms, sd/ms)
	}
	// The same in a ring that wrapped: next write at 1, so 30 is newest,
	// 10 oldest.
	m2, sd2 := soaHistory([]int64{30e6, 10e6, 20e6}, 1, 3, 100*ms)
	if m2 != m || sd2 != sd {
		t.Fatalf("wrapped ring: %v, %v; want %v, %v", m2, sd2, m, sd)
	}
	// Clamped to the timeout: 50, 250 → 50, 100 with weights 1, 2:
	// m = 250/3 = 83.333, σ² = (33.333² + 2·16.667²)/3 = 555.56, σ = 23.570.
	m, sd = soaHistory([]int64{50e6, 250e6}, 0, 2, 100*ms)
	if !near(m/ms, 83.3333, 1e-4) || !near(sd/ms, 23.5702, 1e-4) {
		t.Fatalf("clamped: m, σ = %.4f, %.4f ms; want 83.3333, 23.5702", m/ms, sd/ms)
	}
	if m, sd := soaHistory(nil, 0, 0, 100*ms); m != 0 || sd != 0 {
		t.Fatalf("no history: %v, %v", m, sd)
	}
}

func TestSOAFactorsByHand(t *testing.T) {
	tb, c := newTestTable(1)
	s := newSOA(soaOptions{LatencyRef: 100 * time.Millisecond, Timeout: 100 * time.Millisecond})
	for _, l := range []time.Duration{10, 20, 30} {
		feed(tb, c, 0, 1, l*time.Millisecond, time.Second, nil)
	}
	u := tb.ups[0].Load()
	u.mu.Lock()
	f := s.factors(tb, u, 3, tb.lastSeen())
	u.mu.Unlock()
	// WY' = 1 (no timeout); WN = 1/(1+3) = 0.25; WT = 100/(30+100) = 0.76923;
	// WH = 1 − (23.3333 + 7.4536)/100 = 0.69213.
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"WY'", f.WY, 1}, {"WN", f.WN, 0.25}, {"WT", f.WT, 0.76923}, {"WH", f.WH, 0.69213}} {
		if !near(c.got, c.want, 1e-5) {
			t.Errorf("%s = %.5f, want %.5f", c.name, c.got, c.want)
		}
	}
	// A timeout makes it overloaded for OverloadWindow (30 s).
	feed(tb, c, 0, 1, time.Millisecond, 0, context.DeadlineExceeded)
	c.Advance(30 * time.Second)
	tb.Probe(0, time.Millisecond, nil) // a clock reading
	u.mu.Lock()
	over := s.factors(tb, u, 0, tb.lastSeen()).WY
	u.mu.Unlock()
	c.Advance(time.Millisecond)
	tb.Probe(0, time.Millisecond, nil)
	u.mu.Lock()
	after := s.factors(tb, u, 0, tb.lastSeen()).WY
	u.mu.Unlock()
	if over != 0 || after != 1 {
		t.Fatalf("WY' 30 s after a timeout = %v, just after = %v; want 0, 1", over, after)
	}
}

// TestSOALexicographic checks the priority WY' > WN > WT > WH on two
// upstreams, each case making the loser better on every later factor.
func TestSOALexicographic(t *testing.T) {
	ms := time.Millisecond
	type setup func(tb *Table, c *testClock)
	deliver := func(i int, lat time.Duration, err error) setup {
		return func(tb *Table, c *testClock) { feed(tb, c, i, 1, lat, 0, err) }
	}
	wait := func(d time.Duration) setup { return func(_ *Table, c *testClock) { c.Advance(d) } }
	busy := func(i, n int) setup {
		return func(tb *Table, _ *testClock) {
			for range n {
				tb.Begin(i)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		steps []setup
		want  int
	}{
		{"overload first", []setup{
			deliver(0, 2*time.Second, context.DeadlineExceeded), wait(5 * time.Second),
			deliver(0, ms, nil), deliver(1, 90*ms, nil), deliver(1, 90*ms, nil), busy(1, 3),
		}, 1},
		{"an old timeout is forgotten", []setup{
			deliver(0, 2*time.Second, context.DeadlineExceeded), wait(31 * time.Second),
			deliver(0, ms, nil), deliver(1, 90*ms, nil), busy(1, 3),
		}, 0},
		{"task count before latency", []setup{
			deliver(0, ms, nil), deliver(1, 50*ms, nil), busy(0, 2), busy(1, 1),
		}, 1},
		{"latest latency before history", []setup{
			deliver(0, 5*ms, nil), deliver(0, 5*ms, nil), deliver(0, 30*ms, nil),
			deliver(1, 90*ms, nil), deliver(1, 90*ms, nil), deliver(1, 20*ms, nil),
		}, 1},
		{"history last", []setup{
			deliver(0, 90*ms, nil), deliver(0, 20*ms, nil),
			deliver(1, 10*ms, nil), deliver(1, 20*ms, nil),
		}, 1},
		{"recent history weighs most", []setup{
			// u0: 10, 40, 40 → m = (10+80+120)/6 = 35; u1: 40, 40, 10 →
			// m = (40+80+30)/6 = 25; the same latest latency is needed, so
			// both end on a 20 ms call.
			deliver(0, 10*ms, nil), deliver(0, 40*ms, nil), deliver(0, 40*ms, nil), deliver(0, 20*ms, nil),
			deliver(1, 40*ms, nil), deliver(1, 40*ms, nil), deliver(1, 10*ms, nil), deliver(1, 20*ms, nil),
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, c := newTestTable(1, 1)
			for _, st := range tc.steps {
				st(tb, c)
			}
			s := newSOA(soaOptions{})
			if got := counts(picks(t, s, tb, 50), 2); got[tc.want] != 50 {
				t.Fatalf("picks %v, want all u%d", got, tc.want)
			}
		})
	}
}

func TestSOATiesAndRegistry(t *testing.T) {
	tb, c := newTestTable(1, 1, 1)
	s := newSOA(soaOptions{})
	// Alike: ties at random.
	got := counts(picks(t, s, tb, 3000), 3)
	for _, n := range got {
		if n < 800 {
			t.Fatalf("alike: %v, want about 1000 each", got)
		}
	}
	feed(tb, c, 0, 1, time.Millisecond, 0, nil)
	feed(tb, c, 1, 1, 5*time.Millisecond, 0, nil)
	feed(tb, c, 2, 1, 9*time.Millisecond, 0, nil)
	c.Advance(time.Second)
	tb.Probe(0, time.Millisecond, nil)
	if got := counts(picks(t, s, tb, 20), 3); got[0] != 20 {
		t.Fatalf("local: %v, want all u0", got)
	}
	// The registry's weights win over the local key when every candidate
	// has one.
	s.SetRegistryWeights(map[string]float64{"u0": 1, "u1": 1.5, "u2": 3})
	if got := counts(picks(t, s, tb, 20), 3); got[2] != 20 {
		t.Fatalf("registry u2 highest: %v, want all u2", got)
	}
	// Equal pushed weights: the local key breaks the tie.
	s.SetRegistryWeights(map[string]float64{"u0": 1, "u1": 3, "u2": 3})
	if got := counts(picks(t, s, tb, 20), 3); got[1] != 20 {
		t.Fatalf("registry tie u1, u2: %v, want all u1 (faster)", got)
	}
	// A candidate without a pushed weight: the local key for all…
	s.SetRegistryWeights(map[string]float64{"u1": 1, "u2": 3})
	if got := counts(picks(t, s, tb, 20), 3); got[0] != 20 {
		t.Fatalf("u0 not pushed: %v, want all u0 (local)", got)
	}
	// …unless the pick skips it.
	for range 20 {
		if i, _ := s.Pick(tb, 1<<0); i != 2 {
			t.Fatalf("u0 skipped: picked u%d, want u2 (registry)", i)
		}
	}
	s.SetRegistryWeights(nil)
	if got := counts(picks(t, s, tb, 20), 3); got[0] != 20 {
		t.Fatalf("registry cleared: %v, want all u0", got)
	}
}

func TestSOAInFlightIsLive(t *testing.T) {
	tb, c := newTestTable(1, 1)
	s := newSOA(soaOptions{Interval: time.Hour})
	feed(tb, c, 0, 1, time.Millisecond, 0, nil)
	feed(tb, c, 1, 1, 2*time.Millisecond, 0, nil)
	// Between refreshes, every pick that begins a delivery moves WN.
	var got [2]int
	var tks []Ticket
	for range 10 {
		i, _ := s.Pick(tb, 0)
		got[i]++
		tks = append(tks, tb.Begin(i))
	}
	if got != [2]int{5, 5} {
		t.Fatalf("10 picks, none ended: %v, want 5 and 5 (in flight decides, then latency)", got)
	}
	for _, tk := range tks {
		tb.End(tk, nil)
	}
}
