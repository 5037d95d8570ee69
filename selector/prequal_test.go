package selector

import (
	"errors"
	"testing"
	"time"
)

func TestPrequalQuantile(t *testing.T) {
	for _, c := range []struct {
		x    []int64
		q    float64
		want float64
	}{
		{[]int64{5, 0, 0, 0}, 0.84, 2.6},     // h = 2.52: 0 + 0.52·5
		{[]int64{0, 1}, 0.84, 0.84},          // h = 0.84
		{[]int64{3, 3, 3}, 0.84, 3},          // all equal: none is above
		{[]int64{4, 1, 9, 2}, 0, 1},          // RIF only: the lowest
		{[]int64{4, 1, 9, 2}, 1, 9},          // the highest
		{[]int64{7}, 0.84, 7},                // one value
		{nil, 0.84, 0},                       // none
		{[]int64{0, 10, 20, 30, 40}, .5, 20}, // the median
	} {
		if got := quantile(append([]int64(nil), c.x...), c.q); !near(got, c.want, 1e-9) {
			t.Errorf("quantile(%v, %v) = %v, want %v", c.x, c.q, got, c.want)
		}
	}
}

// prequalPool returns a table of upstreams with the given delivery
// latencies (ms, 8 deliveries each) and in-flight counts, and a prequal
// strategy whose pool holds a probe of every upstream.
func prequalPool(t *testing.T, opt prequalOptions, lat []int, inflight []int) (*Table, *prequal, int64) {
	t.Helper()
	w := make([]int, len(lat))
	tb, c := newTestTable(w...)
	for i, l := range lat {
		feed(tb, c, i, 8, time.Duration(l)*time.Millisecond, time.Millisecond, nil)
		for range inflight[i] {
			tb.Begin(i)
		}
	}
	s := newPrequal(opt)
	now := tb.lastSeen()
	obs := s.ref.get(tb, now, s)
	for i := range lat {
		s.probe(tb, i, obs, now)
	}
	if s.pool != 1<<len(lat)-1 {
		t.Fatalf("pool %#b, want every upstream", s.pool)
	}
	return tb, s, now
}

func TestPrequalHotCold(t *testing.T) {
	all := func(n int) uint64 { return 1<<n - 1 }
	for _, c := range []struct {
		name     string
		opt      prequalOptions
		lat      []int // ms
		inflight []int
		usable   uint64
		want     int
	}{
		// RIFs 0 0 0 0: nothing hot, the lowest latency wins.
		{"cold: lowest latency", prequalOptions{}, []int{30, 10, 20, 40}, []int{0, 0, 0, 0}, all(4), 1},
		// RIFs 5 0 0 0: threshold 2.6, u0 (the fastest) is hot.
		{"the fastest is hot", prequalOptions{}, []int{10, 20, 30, 40}, []int{5, 0, 0, 0}, all(4), 1},
		// RIFs 1 0 0 0: threshold 0.52, u0 hot at one in flight.
		{"one in flight is hot", prequalOptions{}, []int{10, 20, 30, 40}, []int{1, 0, 0, 0}, all(4), 1},
		// RIFs 2 2 2 2: none above the quantile, latency decides.
		{"equal RIFs", prequalOptions{}, []int{40, 30, 20, 10}, []int{2, 2, 2, 2}, all(4), 3},
		// Q_RIF 0: threshold = lowest RIF (0, u0, not usable); u1–u3 all
		// hot: the lowest RIF wins whatever its latency.
		{"all hot: lowest RIF", prequalOptions{QRIF: -1}, []int{10, 10, 20, 40}, []int{0, 3, 4, 1}, 0b1110, 3},
		// RIFs 0 0 3 0 over 4, the cold ones' latency is what counts.
		{"hot one is skipped", prequalOptions{}, []int{50, 40, 5, 45}, []int{0, 0, 3, 0}, all(4), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb, s, now := prequalPool(t, c.opt, c.lat, c.inflight)
			if got := s.choose(tb, now, c.usable); got != c.want {
				t.Fatalf("choose = u%d, want u%d", got, c.want)
			}
		})
	}
}

// TestPrequalTiesAtRandom checks that equal probes share the picks.
func TestPrequalTiesAtRandom(t *testing.T) {
	tb, s, now := prequalPool(t, prequalOptions{}, []int{10, 10, 10, 30}, []int{0, 0, 0, 0})
	var n [4]int
	for range 3000 {
		n[s.choose(tb, now, 0b1111)]++
	}
	for i := range 3 {
		if n[i] < 800 || n[i] > 1200 {
			t.Fatalf("three equal probes, picks %v", n)
		}
	}
	if n[3] != 0 {
		t.Fatalf("the slow one picked: %v", n)
	}
}

// TestPrequalReportedRIF checks that a fresh report's connections are the
// RIF, bumped by one for each pick of a probe of that report, and that a
// newer report starts afresh.
func TestPrequalReportedRIF(t *testing.T) {
	tb, s, _ := prequalPool(t, prequalOptions{}, []int{10, 20}, []int{0, 0})
	tb.Report(0, Load{Connections: 7})
	tb.Report(1, Load{Connections: 7})
	for range 3 {
		tb.Begin(0) // our own in flight do not count when a report is fresh
	}
	now := tb.lastSeen()
	s.ref.expire()
	obs := s.ref.get(tb, now, s)
	s.probe(tb, 0, obs, now)
	s.probe(tb, 1, obs, now)
	if r := s.rif(tb, 0, now); r != 7 {
		t.Fatalf("RIF with a report of 7 connections = %d", r)
	}
	if i := s.choose(tb, now, 0b11); i != 0 {
		t.Fatalf("u0 (RIF 7, 10 ms) against u1 (RIF 7, 20 ms): picked u%d", i)
	}
	for range 2 { // what Pick does when it picks u0's probe
		s.bumpRep[0], s.bumps[0] = s.probes[0].repAt, s.bumps[0]+1
	}
	if r := s.rif(tb, 0, now); r != 9 {
		t.Fatalf("RIF after two bumps = %d, want 9", r)
	}
	if i := s.choose(tb, now, 0b11); i != 1 { // threshold 7 + 0.84·2
		t.Fatalf("u0 (RIF 9, 10 ms) against u1 (RIF 7, 20 ms): picked u%d, want the cold u1", i)
	}
	tb.Report(0, Load{At: tb.now().Add(time.Millisecond), Connections: 1})
	s.ref.expire()
	obs = s.ref.get(tb, now, s)
	s.probe(tb, 0, obs, now)
	if r := s.rif(tb, 0, now); r != 1 {
		t.Fatalf("RIF after a newer report of 1 = %d, want 1 (bumps reset)", r)
	}
}

// TestPrequalSinkhole pins the published rule's weak spot, kept on purpose:
// an upstream that fails fast has the lowest latency and wins.
func TestPrequalSinkhole(t *testing.T) {
	tb, c := newTestTable(1, 1, 1)
	feed(tb, c, 0, 8, 20*time.Millisecond, time.Millisecond, nil)
	feed(tb, c, 1, 8, 30*time.Millisecond, time.Millisecond, nil)
	feed(tb, c, 2, 8, time.Millisecond, time.Millisecond, errors.New("refused by the application"))
	s := newPrequal(prequalOptions{})
	var n [3]int
	for range 300 {
		i, _ := s.Pick(tb, 0)
		n[i]++
	}
	if n[2] < 200 {
		t.Fatalf("fast-failing u2 got %d of 300 picks (%v); the published rule sends it most", n[2], n)
	}
}

func TestPrequalPickNoAlloc(t *testing.T) {
	tb := benchTable(16, 1)
	s := newPrequal(prequalOptions{})
	s.Pick(tb, 0)
	if a := testing.AllocsPerRun(1000, func() { s.Pick(tb, 1<<3) }); a != 0 {
		t.Fatalf("Pick allocates %.1f times per call", a)
	}
}

// BenchmarkPrequalPick is Pick at 2, 4 and 16 upstreams, on the gateway's
// own in-flight counts and on reported connections.
func BenchmarkPrequalPick(b *testing.B) {
	for _, report := range []bool{false, true} {
		for _, n := range []int{2, 4, 16} {
			name := "inflight"
			if report {
				name = "reported"
			}
			b.Run(name+"/n="+string(rune('0'+n/10))+string(rune('0'+n%10)), func(b *testing.B) {
				tb, s := benchTable(n, 0), newPrequal(prequalOptions{})
				if report {
					for i := range n {
						tb.Report(i, Load{Connections: i % 5})
					}
				}
				s.Pick(tb, 0)
				b.ReportAllocs()
				for b.Loop() {
					s.Pick(tb, 0)
				}
			})
		}
	}
}
