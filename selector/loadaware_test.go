package selector

import (
	"testing"
	"time"
)

func TestLoadAwareFilterByHand(t *testing.T) {
	tb, _ := newTestTable(1, 1, 1, 1)
	// λ = 1/3 each: U = (disk + cpu + net)/3.
	//   u0: (0.9 + 0.6 + 0.3)/3 = 0.6
	//   u1: (0.3 + 0.3 + 0.3)/3 = 0.3
	//   u2: (0.0 + 0.3 + 0.0)/3 = 0.1
	//   u3: (0.6 + 0.6 + 0.6)/3 = 0.6
	// average 1.6/4 = 0.4: u0 and u3 dropped, u1 and u2 half each.
	for i, l := range []Load{
		{DiskIO: 0.9, CPU: 0.6, Network: 0.3},
		{DiskIO: 0.3, CPU: 0.3, Network: 0.3},
		{DiskIO: 0.0, CPU: 0.3, Network: 0.0},
		{DiskIO: 0.6, CPU: 0.6, Network: 0.6},
	} {
		tb.Report(i, l)
	}
	s := newLoadAware(loadAwareOptions{})
	got := counts(picks(t, s, tb, 10000), 4)
	if got[0] != 0 || got[3] != 0 || !near(float64(got[1])/10000, 0.5, 0.03) {
		t.Fatalf("picks %v, want u1 and u2 only, half each", got)
	}
	if s.Fallbacks() != 0 {
		t.Fatalf("Fallbacks = %d with every report fresh", s.Fallbacks())
	}
	// A pick that skips u1 and u2: of u0 and u3 (0.6 each, average 0.6)
	// neither is above it.
	got = make([]int, 4)
	for range 1000 {
		i, _ := s.Pick(tb, 1<<1|1<<2)
		got[i]++
	}
	if got[0] < 400 || got[3] < 400 {
		t.Fatalf("u1, u2 skipped: %v, want u0 and u3 alike", got)
	}

	// λ = (0.5, 0.3, 0.2), given as 5, 3, 2:
	//   u0: 0.45 + 0.18 + 0.06 = 0.69; u1: 0.3; u2: 0.09; u3: 0.6;
	//   average 1.68/4 = 0.42: u1 and u2.
	w := newLoadAware(loadAwareOptions{Lambda: [3]float64{5, 3, 2}})
	if l := w.lambda; !near(l[0], 0.5, 1e-12) || !near(l[1], 0.3, 1e-12) || !near(l[2], 0.2, 1e-12) {
		t.Fatalf("λ = %v, want 0.5, 0.3, 0.2", l)
	}
	if u := w.load(&Load{DiskIO: 0.9, CPU: 0.6, Network: 0.3}); !near(u, 0.69, 1e-12) {
		t.Fatalf("U(u0) = %v, want 0.69", u)
	}
	got = counts(picks(t, w, tb, 2000), 4)
	if got[0] != 0 || got[3] != 0 {
		t.Fatalf("λ 0.5/0.3/0.2: %v, want u1 and u2 only", got)
	}
}

func TestLoadAwareFallback(t *testing.T) {
	tb, c := newTestTable(1, 1, 1)
	s := newLoadAware(loadAwareOptions{}) // LoadTTL is the table's default, 30 s
	if s.fallback.Name() != "least_conn" {
		t.Fatalf("default fallback %q, want least_conn", s.fallback.Name())
	}
	tb.Report(0, Load{CPU: 0.9})
	tb.Report(1, Load{CPU: 0.1})
	// u2 has never reported: every pick falls back to least_conn, which
	// takes the upstream with the fewest in flight.
	tb.Begin(0)
	tb.Begin(1)
	for range 10 {
		if i, _ := s.Pick(tb, 0); i != 2 {
			t.Fatalf("fallback to least_conn picked u%d, want u2 (none in flight)", i)
		}
	}
	if s.Fallbacks() != 10 {
		t.Fatalf("Fallbacks = %d, want 10", s.Fallbacks())
	}
	// Skipping u2, the candidates have reports: no fallback.
	for range 10 {
		if i, _ := s.Pick(tb, 1<<2); i != 1 {
			t.Fatalf("u2 skipped: picked u%d, want u1 (the lighter)", i)
		}
	}
	if s.Fallbacks() != 10 {
		t.Fatalf("Fallbacks = %d after picks with fresh reports, want 10", s.Fallbacks())
	}
	tb.Report(2, Load{CPU: 0.6}) // U 0.2, above the average 0.178
	c.Advance(time.Second)       // past the reading interval
	tb.Probe(0, time.Millisecond, nil)
	if i, _ := s.Pick(tb, 0); i != 1 || s.Fallbacks() != 10 {
		t.Fatalf("all reported: picked u%d, Fallbacks %d; want u1, 10", i, s.Fallbacks())
	}
	// 30 s after u0's and u1's reports (at 0) they are still fresh (age ≤
	// LoadTTL); a millisecond later they are stale.
	c.Set(30 * time.Second)
	tb.Probe(0, time.Millisecond, nil)
	if i, _ := s.Pick(tb, 0); i != 1 || s.Fallbacks() != 10 {
		t.Fatalf("reports 30 s old: picked u%d, Fallbacks %d; want u1, 10", i, s.Fallbacks())
	}
	c.Advance(time.Millisecond)
	tb.Probe(0, time.Millisecond, nil)
	if i, _ := s.Pick(tb, 0); i != 2 || s.Fallbacks() != 11 {
		t.Fatalf("stale reports: picked u%d, Fallbacks %d; want u2 (least_conn), 11", i, s.Fallbacks())
	}
	// A custom fallback is used and counted the same way.
	r := newLoadAware(loadAwareOptions{Fallback: new(roundRobin)})
	if got := letters(picks(t, r, tb, 4)); got != "abca" || r.Fallbacks() != 4 {
		t.Fatalf("round_robin fallback: %s, %d fallbacks; want abca, 4", got, r.Fallbacks())
	}
}

func TestLoadAwareNoAlloc(t *testing.T) {
	tb, _ := newTestTable(1, 1, 1, 1)
	for i := range 4 {
		tb.Report(i, Load{CPU: float64(i) / 4})
	}
	s := newLoadAware(loadAwareOptions{})
	s.Pick(tb, 0)
	if a := testing.AllocsPerRun(1000, func() { s.Pick(tb, 0) }); a != 0 {
		t.Fatalf("Pick allocates %.1f times", a)
	}
}
