package selector

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

// drfExample is a four-server example worked by hand from § 000's
// formulas. Factors (failures in the last second, in flight, consecutive
// failures, response-time σ in ms, probe latency in ms):
//
//	      F   A   S   σ   L
//	A     0   1   0  10  40
//	B     2   1   0  30  20
//	C     0   3   1  20  30
//	D     2   3   3  20  30
//
// Z-scores, z = (x − μ)/σ with the population σ:
//
//	F: μ 1, σ 1            → −1, 1, −1, 1
//	A: μ 2, σ 1            → −1, −1, 1, 1
//	S: μ 1, σ √1.5 ≈ 1.2247 → −0.8165, −0.8165, 0, 1.6330
//	σ: μ 20, σ √50 ≈ 7.0711 → −√2, √2, 0, 0
//	L: μ 30, σ √50          → √2, −√2, 0, 0
//
// Delphi: TR = (10, 100, 10, 200, 400), N = (1, 5, 1, 40, 20); shares
// N/TR = 0.1, 0.05, 0.1, 0.2, 0.05: the dominant factor is σ, weight 12.
//
//	score     A·1 (no Delphi)            A·12 on σ
//	A   −1−1−0.8165−√2+√2 = −2.8165    −2.8165 − 11√2 = −18.3728
//	B    1−1−0.8165+√2−√2 = −0.8165    −0.8165 + 11√2 =  14.7399
//	C   −1+1+0+0+0        =  0          0
//	D    1+1+1.6330       =  3.6330     3.6330
//
// Without the weighting the order is A, B, C, D and the best half is A
// (weight 2, p = 2/3) and B (1, 1/3); the ×12 on σ sends B, the server
// with the spread-out response times, last: A, C, D, B, and keeps A (2/3)
// and C (1/3).
var drfExample = struct {
	x      [4][drfFactors]float64
	tr, n  DRFFactors
	plain  [4]float64
	drf    [4]float64
	zScore [drfFactors][4]float64
}{
	x: [4][drfFactors]float64{
		{0, 1, 0, 10, 40},
		{2, 1, 0, 30, 20},
		{0, 3, 1, 20, 30},
		{2, 3, 3, 20, 30},
	},
	tr:    DRFFactors{Failures: 10, InFlight: 100, ConsecutiveFailures: 10, ResponseTimeStdDev: 200, Latency: 400},
	n:     DRFFactors{Failures: 1, InFlight: 5, ConsecutiveFailures: 1, ResponseTimeStdDev: 40, Latency: 20},
	plain: [4]float64{-2.8165, -0.8165, 0, 3.6330},
	drf:   [4]float64{-18.3728, 14.7399, 0, 3.6330},
	zScore: [drfFactors][4]float64{
		{-1, 1, -1, 1},
		{-1, -1, 1, 1},
		{-0.8165, -0.8165, 0, 1.6330},
		{-math.Sqrt2, math.Sqrt2, 0, 0},
		{math.Sqrt2, -math.Sqrt2, 0, 0},
	},
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestDRFZScoresByHand(t *testing.T) {
	ex := drfExample
	for f := range drfFactors {
		var x, z [4]float64
		has := []bool{true, true, true, true}
		for j := range 4 {
			x[j] = ex.x[j][f]
		}
		drfZ(x[:], has, z[:])
		for j := range 4 {
			if !near(z[j], ex.zScore[f][j], 1e-4) {
				t.Errorf("factor %s, server %c: z = %.4f, want %.4f", drfFactorNames[f], 'A'+j, z[j], ex.zScore[f][j])
			}
		}
	}
	// A factor nobody differs on says nothing; a missing value is neutral
	// and leaves μ and σ to the others.
	var z [3]float64
	drfZ([]float64{7, 7, 7}, []bool{true, true, true}, z[:])
	if z != [3]float64{} {
		t.Errorf("σ = 0: z = %v, want all 0", z)
	}
	drfZ([]float64{10, 0, 30}, []bool{true, false, true}, z[:])
	if z != [3]float64{-1, 0, 1} {
		t.Errorf("middle value missing: z = %v, want [-1 0 1]", z)
	}
}

func TestDRFDominantShareAndScoresByHand(t *testing.T) {
	ex := drfExample
	if d := drfDominant(ex.tr.vec(), ex.n.vec()); d != 3 {
		t.Fatalf("dominant factor = %d, want 3 (rt_stddev, share 0.2)", d)
	}
	if d := drfDominant([drfFactors]float64{}, [drfFactors]float64{}); d != -1 {
		t.Fatalf("no Delphi: dominant factor = %d, want -1", d)
	}
	// A tie goes to the first factor: failures and consecutive failures both 0.1.
	if d := drfDominant([drfFactors]float64{10, 100, 10, 400, 400}, [drfFactors]float64{1, 5, 1, 20, 20}); d != 0 {
		t.Fatalf("tie: dominant factor = %d, want 0", d)
	}
	if w := newDRF(DRFOptions{TR: ex.tr, N: ex.n}).Weights(); w != (DRFFactors{1, 1, 1, 12, 1}) {
		t.Fatalf("weights = %+v, want 12 on rt_stddev only", w)
	}
	if w := newDRF(DRFOptions{}).Weights(); w != (DRFFactors{1, 1, 1, 1, 1}) {
		t.Fatalf("weights without Delphi = %+v, want all 1", w)
	}

	var x [MaxUpstreams][drfFactors]float64
	var has [MaxUpstreams][drfFactors]bool
	for j := range 4 {
		x[j] = ex.x[j]
		has[j] = [drfFactors]bool{true, true, true, true, true}
	}
	for _, c := range []struct {
		name string
		s    *drfStrategy
		want [4]float64
	}{
		{"plain", newDRF(DRFOptions{}), ex.plain},
		{"x12", newDRF(DRFOptions{TR: ex.tr, N: ex.n}), ex.drf},
	} {
		var score [MaxUpstreams]float64
		drfScore(&x, &has, 4, c.s.w, &score)
		for j := range 4 {
			if !near(score[j], c.want[j], 1e-3) {
				t.Errorf("%s: score of %c = %.4f, want %.4f", c.name, 'A'+j, score[j], c.want[j])
			}
		}
	}
}

// drfTable sets up the four servers of drfExample in a table: their
// failures, in-flight counts, latencies and probes.
func drfTable(t *testing.T) (*Table, *testClock) {
	t.Helper()
	tb, c := newTestTable(1, 1, 1, 1)
	ms := time.Millisecond
	boom := errors.New("boom")
	// Response-time σ: deliveries in pairs μ ± σ, μ = 100 ms, give exactly
	// σ (lifetime, Welford). ok and fail say how each of a pair ended.
	pair := func(j int, sd time.Duration, first, second error) {
		feed(tb, c, j, 1, 100*ms-sd*ms, 0, first)
		feed(tb, c, j, 1, 100*ms+sd*ms, 0, second)
	}
	pair(0, 10, nil, nil)
	pair(1, 30, nil, nil)
	pair(2, 20, nil, boom)     // C: one failure, long ago, consecutive 1
	pair(3, 20, nil, boom)     // D: the first of three consecutive
	c.Advance(2 * time.Second) // those failure buckets are over
	// Failures in the last second: B two then successes (consecutive 0),
	// D two more (consecutive 3).
	pair(1, 30, boom, boom)
	pair(1, 30, nil, nil)
	pair(3, 20, boom, boom)
	for j, n := range []int{1, 1, 3, 3} {
		for range n {
			tb.Begin(j)
		}
	}
	for j, l := range []time.Duration{40, 20, 30, 30} {
		tb.Probe(j, l*ms, nil)
	}
	return tb, c
}

func TestDRFFactorsFromTable(t *testing.T) {
	tb, _ := drfTable(t)
	s := newDRF(DRFOptions{})
	now := tb.lastSeen()
	snap := tb.Snapshot()
	for j := range 4 {
		x, has := s.factors(tb, j, now)
		want := drfExample.x[j]
		if x[0] != want[0] || x[1] != want[1] || x[2] != want[2] || !near(x[3], want[3], 1e-6) || x[4] != want[4] || !has[4] {
			t.Errorf("%c: factors %v (probe known %v), want %v", 'A'+j, x, has[4], want)
		}
		if got := time.Duration(x[3] * 1e6); absDur(got-snap[j].LifetimeStdDev) > time.Microsecond {
			t.Errorf("%c: rt σ %v, Snapshot's LifetimeStdDev %v", 'A'+j, got, snap[j].LifetimeStdDev)
		}
		if st := snap[j]; float64(st.FailuresLastSecond) != x[0] || float64(st.InFlight) != x[1] || float64(st.ConsecutiveFailures) != x[2] {
			t.Errorf("%c: factors %v disagree with Snapshot %+v", 'A'+j, x, st)
		}
	}
	w := newDRF(DRFOptions{ResponseTime: DRFWindowed})
	for j := range 4 {
		x, _ := w.factors(tb, j, now)
		if got := time.Duration(x[3] * 1e6); absDur(got-snap[j].LatencyStdDev) > time.Microsecond {
			t.Errorf("%c windowed: rt σ %v, Snapshot's LatencyStdDev %v", 'A'+j, got, snap[j].LatencyStdDev)
		}
	}
	if DRFLifetime.String() != "lifetime" || DRFWindowed.String() != "window" {
		t.Errorf("config spellings %q, %q", DRFLifetime, DRFWindowed)
	}
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }

// TestDRFPicks checks the whole rule on the hand example: A 2/3 and C 1/3
// with the Delphi weighting, A 2/3 and B 1/3 without.
func TestDRFPicks(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  DRFOptions
		want [4]float64
	}{
		{"x12", DRFOptions{TR: drfExample.tr, N: drfExample.n}, [4]float64{2.0 / 3, 0, 1.0 / 3, 0}},
		{"plain", DRFOptions{}, [4]float64{2.0 / 3, 1.0 / 3, 0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb, _ := drfTable(t)
			s := newDRF(c.opt)
			const n = 30000
			got := counts(picks(t, s, tb, n), 4)
			for j := range 4 {
				if p := float64(got[j]) / n; !near(p, c.want[j], 0.015) {
					t.Errorf("%c picked %.3f of the time, want %.3f: %v", 'A'+j, p, c.want[j], got)
				}
			}
		})
	}
}

// TestDRFDecreasingProbabilities checks the arithmetically decreasing pick
// over the kept half with a fixed seed: k kept, weights k, k−1, …, 1.
// Servers differ only in probe latency, so the order is by latency.
func TestDRFDecreasingProbabilities(t *testing.T) {
	for _, n := range []int{1, 2, 4, 5, 8, 9} {
		tb, _ := newTestTable(make([]int, n)...)
		for j := range n {
			tb.Probe(j, time.Duration(n-j)*time.Millisecond, nil) // the last index is the fastest
		}
		s := newDRF(DRFOptions{})
		const picks = 60000
		got := make([]int, n)
		for range picks {
			i, ok := s.Pick(tb, 0)
			if !ok {
				t.Fatal("nothing picked")
			}
			got[i]++
		}
		k := (n + 1) / 2
		total := float64(k * (k + 1) / 2)
		for r := range n {
			j := n - 1 - r // rank r
			want := 0.0
			if r < k {
				want = float64(k-r) / total
			}
			if p := float64(got[j]) / picks; !near(p, want, 0.01) {
				t.Errorf("n=%d: rank %d picked %.4f, want %d/%d = %.4f: %v", n, r, p, max(k-r, 0), int(total), want, got)
			}
		}
	}
}

func TestDRFSkipDownAndTies(t *testing.T) {
	tb, _ := newTestTable(1, 1, 1, 1, 1)
	s := newDRF(DRFOptions{})
	// No statistics at all: every score is 0, a five-way tie, uniform.
	got := counts(picks(t, s, tb, 20000), 5)
	for j, c := range got {
		if !near(float64(c)/20000, 0.2, 0.015) {
			t.Fatalf("alike: %v, want uniform", got)
		}
		_ = j
	}
	for j := range 5 {
		tb.Probe(j, time.Duration(j+1)*time.Millisecond, nil) // u0 fastest
	}
	tb.SetUp(4, false) // a live-set change re-scores at once
	// Four live: keep u0 (2/3) and u1 (1/3). Skipping u0 (a retry): of
	// u1, u2, u3, keep u1 (2/3) and u2 (1/3).
	got = make([]int, 5)
	for range 30000 {
		i, _ := s.Pick(tb, 1<<0)
		got[i]++
	}
	if !near(float64(got[1])/30000, 2.0/3, 0.015) || !near(float64(got[2])/30000, 1.0/3, 0.015) || got[0]+got[3]+got[4] != 0 {
		t.Fatalf("skip u0: %v, want u1 2/3, u2 1/3", got)
	}
	// Equal scores at the cut are kept together: u1 and u2 alike.
	tb.Probe(2, 2*time.Millisecond, nil)
	tb.SetUp(3, false)
	s.Pick(tb, 0)
	tb.SetUp(3, true)
	// u0 rank 0 (weight 2), u1 and u2 rank 1 (weight 1 each), u3 rank 3.
	got = counts(picks(t, s, tb, 40000), 5)
	for j, want := range []float64{0.5, 0.25, 0.25, 0, 0} {
		if !near(float64(got[j])/40000, want, 0.015) {
			t.Fatalf("tie at the cut: %v, want 1/2, 1/4, 1/4", got)
		}
	}
}

func TestDRFPeriod(t *testing.T) {
	tb, c := newTestTable(1, 1)
	s := newDRF(DRFOptions{Period: time.Minute})
	tb.Probe(0, time.Millisecond, nil)
	tb.Probe(1, 9*time.Millisecond, nil)
	if got := counts(picks(t, s, tb, 100), 2); got[0] != 100 {
		t.Fatalf("u0 faster: %v, want all u0 (keep 1 of 2)", got)
	}
	c.Advance(59 * time.Second)
	tb.Probe(0, 20*time.Millisecond, nil) // u0 slower now, and the clock read
	if got := counts(picks(t, s, tb, 100), 2); got[0] != 100 {
		t.Fatalf("before the period: %v, want the old order", got)
	}
	c.Advance(time.Second)
	tb.Probe(1, 9*time.Millisecond, nil)
	if got := counts(picks(t, s, tb, 100), 2); got[1] != 100 {
		t.Fatalf("after the period: %v, want all u1", got)
	}
}

func TestDRFValidate(t *testing.T) {
	ok := DRFOptions{TR: drfExample.tr, N: drfExample.n}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []DRFOptions{
		{TR: DRFFactors{Latency: -1}},
		{TR: DRFFactors{Latency: math.NaN()}},
		{N: DRFFactors{Latency: 1}},
		{DominantWeight: 0.5},
		{Period: -time.Second},
		{ResponseTime: 7},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestDRFNoAlloc(t *testing.T) {
	tb, _ := drfTable(t)
	s := newDRF(DRFOptions{TR: drfExample.tr, N: drfExample.n})
	s.Pick(tb, 0)
	if a := testing.AllocsPerRun(1000, func() { s.Pick(tb, 0); s.Pick(tb, 1) }); a != 0 {
		t.Fatalf("Pick allocates %.1f times", a)
	}
}

// TestDRFFactorsByIndex checks At and Set against the fields, in the order
// of DRFFactorNames, and that the names returned are a copy.
func TestDRFFactorsByIndex(t *testing.T) {
	names := DRFFactorNames()
	if want := []string{"failures", "in_flight", "consecutive_failures", "rt_stddev", "latency"}; !slices.Equal(names, want) {
		t.Fatalf("DRFFactorNames = %q, want %q", names, want)
	}
	names[0] = "changed"
	if DRFFactorNames()[0] != "failures" {
		t.Fatal("DRFFactorNames returns the package's own array")
	}
	var f DRFFactors
	for k := range names {
		f.Set(k, float64(10+k))
	}
	if f != (DRFFactors{Failures: 10, InFlight: 11, ConsecutiveFailures: 12, ResponseTimeStdDev: 13, Latency: 14}) {
		t.Fatalf("Set by index gave %+v", f)
	}
	for k := range names {
		if f.At(k) != float64(10+k) {
			t.Fatalf("At(%d) = %v, want %v", k, f.At(k), 10+k)
		}
	}
}

// TestDRFWeightsFromDelphi: the amounts of the Delphi example
// (selector/delphi's TestDelphiTwoRounds) put the weight on latency, 12.
func TestDRFWeightsFromDelphi(t *testing.T) {
	opt := DRFOptions{TR: DRFFactors{InFlight: 107.5, Latency: 152.5}, N: DRFFactors{InFlight: 2, Latency: 10}}
	if err := opt.Validate(); err != nil {
		t.Fatal(err)
	}
	if w := newDRF(opt).Weights(); w != (DRFFactors{1, 1, 1, 1, 12}) {
		t.Fatalf("drf weights from the Delphi result: %+v, want 12 on latency", w)
	}
}
