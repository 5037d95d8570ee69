package selector

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// picks returns n picks of s with skip 0, with no deliveries in between.
func picks(t *testing.T, s Strategy, tb *Table, n int) []int {
	t.Helper()
	out := make([]int, n)
	for k := range out {
		i, ok := s.Pick(tb, 0)
		if !ok {
			t.Fatalf("pick %d: nothing picked", k)
		}
		out[k] = i
	}
	return out
}

// letters writes picks as a, b, c…
func letters(p []int) string {
	b := make([]byte, len(p))
	for k, i := range p {
		b[k] = byte('a' + i)
	}
	return string(b)
}

// counts tallies picks per index.
func counts(p []int, n int) []int {
	c := make([]int, n)
	for _, i := range p {
		c[i]++
	}
	return c
}

// feed records n deliveries of latency lat to upstream i, ending at the
// clock's time and advancing it by step after each.
func feed(tb *Table, c *testClock, i, n int, lat, step time.Duration, err error) {
	for range n {
		now := c.Now()
		tb.record(tb.ups[i].Load(), now.Add(-lat), now, err)
		c.Advance(step)
	}
}

func TestNewAndNames(t *testing.T) {
	want := []string{"cswlc", "drf", "drf_cswlc", "irlb", "least_conn", "load_aware", "p2c_ewma", "prequal", "random", "ribbon_wrt", "round_robin", "soa", "weighted_round_robin"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		if s := mustNew(t, n); s.Name() != n {
			t.Errorf("New(%q).Name() = %q", n, s.Name())
		}
	}
	_, err := New("least_connections", StrategyOptions{})
	if !errors.Is(err, ErrUnknownStrategy) || !strings.Contains(err.Error(), "least_conn, load_aware, p2c_ewma") {
		t.Fatalf("New of an unknown name: %v", err)
	}
}

func TestRoundRobin(t *testing.T) {
	tb, _ := newTestTable(1, 1, 1)
	s := mustNew(t, "round_robin")
	if got := letters(picks(t, s, tb, 7)); got != "abcabca" {
		t.Fatalf("3 up: %s, want abcabca", got)
	}
	tb, _ = newTestTable(1, 1, 1)
	s = mustNew(t, "round_robin")
	tb.SetUp(1, false)
	if got := letters(picks(t, s, tb, 6)); got != "acacac" {
		t.Fatalf("b down: %s, want acacac (no double turn for c)", got)
	}
	tb.SetUp(1, true)
	if i, _ := s.Pick(tb, 1<<0|1<<2); i != 1 {
		t.Fatalf("a and c skipped: picked %d", i)
	}
	// The position moved past b: the next is c.
	if got := letters(picks(t, s, tb, 4)); got != "cabc" {
		t.Fatalf("after the retry: %s, want cabc", got)
	}
}

func TestSmoothWeightedNginxSequence(t *testing.T) {
	tb, _ := newTestTable(5, 1, 1)
	s := mustNew(t, "weighted_round_robin")
	// The example nginx gave when it introduced smooth weighted round robin
	// (1.3.1, 2012): weights { 5, 1, 1 } give { a, a, b, a, c, a, a }.
	if got := letters(picks(t, s, tb, 21)); got != strings.Repeat("aabacaa", 3) {
		t.Fatalf("weights 5,1,1: %s, want aabacaa×3", got)
	}

	tb, _ = newTestTable(3, 2, 1)
	s = mustNew(t, "weighted_round_robin")
	if got := counts(picks(t, s, tb, 600), 3); !slices.Equal(got, []int{300, 200, 100}) {
		t.Fatalf("weights 3,2,1 over 600 picks: %v", got)
	}
	// c down: a and b alone, in proportion 3:2, smoothly.
	tb.SetUp(2, false)
	if got := letters(picks(t, s, tb, 10)); strings.Count(got, "a") != 6 || strings.Contains(got, "aaa") {
		t.Fatalf("weights 3,2 with c down: %s", got)
	}
}

func TestSmoothWeightedFailureLowersEffectiveWeight(t *testing.T) {
	tb, c := newTestTable(5, 1, 1)
	s := mustNew(t, "weighted_round_robin")
	picks(t, s, tb, 7) // a full cycle: every current weight back at 0
	feed(tb, c, 0, 1, time.Millisecond, 0, errors.New("refused"))
	// nginx, max_fails=1: effective(a) = 5 − 5 = 0, then +1 per pick:
	//   pick 1: current a 0 b 1 c 1 → b;  pick 2: a 1 b 0 c 2 → c;
	//   pick 3: a 3 b 1 c -1 → a; … (nginx's loop run by hand).
	if got := letters(picks(t, s, tb, 14)); got != "bcaabaacaaabaa" {
		t.Fatalf("after a failure of a: %s, want bcaabaacaaabaa", got)
	}
	// Recovered: every 7 picks hold 5 a, 1 b, 1 c again.
	if got := counts(picks(t, s, tb, 700), 3); !slices.Equal(got, []int{500, 100, 100}) {
		t.Fatalf("after recovery, 700 picks: %v", got)
	}
}

func TestLeastConn(t *testing.T) {
	tb, _ := newTestTable(1, 1, 1)
	s := mustNew(t, "least_conn")
	for range 3 {
		tb.Begin(0)
	}
	for range 2 {
		tb.Begin(2)
	}
	for range 100 {
		if i, _ := s.Pick(tb, 0); i != 1 {
			t.Fatalf("in flight 3,0,2: picked %d, want the idle one", i)
		}
	}
	tk := tb.Begin(1)
	tb.Begin(1)
	tb.Begin(1)
	tb.Begin(1) // 3, 4, 2
	if i, _ := s.Pick(tb, 0); i != 2 {
		t.Fatalf("in flight 3,4,2: picked %d", i)
	}
	if i, _ := s.Pick(tb, 1<<2); i != 0 {
		t.Fatalf("in flight 3,4,2, c skipped: picked %d", i)
	}
	tb.End(tk, nil) // 3, 3, 2
	if i, _ := s.Pick(tb, 1<<2); i != 0 && i != 1 {
		t.Fatalf("tie: picked %d", i)
	}

	// Ties go either way, at random.
	tb, _ = newTestTable(1, 1, 1, 1)
	got := counts(picks(t, s, tb, 4000), 4)
	for i, n := range got {
		if n < 800 || n > 1200 {
			t.Fatalf("all idle: u%d got %d of 4000: %v", i, n, got)
		}
	}

	// Weighted: in flight per unit of weight.
	tb, _ = newTestTable(3, 1)
	for range 2 {
		tb.Begin(0)
	}
	tb.Begin(1) // 2/3 < 1/1
	if i, _ := s.Pick(tb, 0); i != 0 {
		t.Fatalf("weights 3,1, in flight 2,1: picked %d, want a", i)
	}
	tb.Begin(0) // 3/3 = 1/1
	if got := counts(picks(t, s, tb, 1000), 2); got[0] < 400 || got[1] < 400 {
		t.Fatalf("weights 3,1, in flight 3,1 (a tie): %v", got)
	}
}

func TestRandomUniform(t *testing.T) {
	tb, _ := newTestTable(1, 1, 1, 1, 1)
	tb.SetUp(3, false)
	got := counts(picks(t, mustNew(t, "random"), tb, 40000), 5)
	if got[3] != 0 {
		t.Fatalf("u3 down was picked: %v", got)
	}
	for _, i := range []int{0, 1, 2, 4} {
		if math.Abs(float64(got[i])-10000) > 400 { // 4σ
			t.Fatalf("uniform over 4: %v", got)
		}
	}
}

func TestPeakEWMA(t *testing.T) {
	tb, c := newTestTable(1)
	u := tb.ups[0].Load()
	peak := func() float64 {
		p, ok := u.peakAt(tb.clock(), tb.tau)
		if !ok {
			t.Fatal("no estimate")
		}
		return p / 1e6
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*want {
			t.Fatalf("%s: %.6f ms, want %.6f ms", what, got, want)
		}
	}
	if _, ok := u.peakAt(0, tb.tau); ok {
		t.Fatal("an estimate before any delivery")
	}
	feed(tb, c, 0, 1, 100*time.Millisecond, 0, nil)
	near("first sample", peak(), 100)
	c.Advance(10 * time.Second)
	near("after τ idle", peak(), 100*math.Exp(-1))
	feed(tb, c, 0, 1, 50*time.Millisecond, 0, nil) // above 36.8: reset
	near("a slower sample", peak(), 50)
	c.Advance(5 * time.Second)
	feed(tb, c, 0, 1, 10*time.Millisecond, 0, nil) // below 50·e^-0.5 = 30.3: blend
	w := math.Exp(-0.5)
	near("a faster sample", peak(), 50*w+10*(1-w))
	c.Advance(time.Second)
	feed(tb, c, 0, 1, time.Millisecond, 0, errors.New("503")) // a fast failure
	near("a failure", peak(), 5000)
	if s := tb.Snapshot()[0]; s.PeakEWMA != 5*time.Second {
		t.Fatalf("Snapshot PeakEWMA = %v", s.PeakEWMA)
	}
}

func TestP2CEWMA(t *testing.T) {
	s := mustNew(t, "p2c_ewma")
	tb, c := newTestTable(1, 1)
	feed(tb, c, 0, 5, 10*time.Millisecond, 10*time.Millisecond, nil)
	// u1 has no data: cost DefaultRTT = 0, so it is tried.
	if i, _ := s.Pick(tb, 0); i != 1 {
		t.Fatalf("a new upstream was not tried: picked %d", i)
	}
	// … but not flooded while its first delivery is in flight (Finagle's penalty).
	tk := tb.Begin(1)
	for range 10 {
		if i, _ := s.Pick(tb, 0); i != 0 {
			t.Fatalf("a new upstream with a delivery in flight and no cost: picked %d", i)
		}
	}
	tb.End(tk, nil)

	// With no delivery data, a probe's round-trip is the cost.
	tb, c = newTestTable(1, 1)
	feed(tb, c, 0, 1, 10*time.Millisecond, 0, nil)
	tb.Probe(1, 50*time.Millisecond, nil)
	if i, _ := s.Pick(tb, 0); i != 0 {
		t.Fatalf("probe 50 ms vs 10 ms measured: picked %d", i)
	}
	tb.Probe(1, 5*time.Millisecond, nil)
	if i, _ := s.Pick(tb, 0); i != 1 {
		t.Fatalf("probe 5 ms vs 10 ms measured: picked %d", i)
	}

	// load = cost × (in flight + 1): 10 ms × 3 > 25 ms × 1.
	tb, c = newTestTable(1, 1)
	feed(tb, c, 0, 1, 10*time.Millisecond, 0, nil)
	feed(tb, c, 1, 1, 25*time.Millisecond, 0, nil)
	if i, _ := s.Pick(tb, 0); i != 0 {
		t.Fatalf("10 ms vs 25 ms idle: picked %d", i)
	}
	tb.Begin(0)
	tb.Begin(0)
	if i, _ := s.Pick(tb, 0); i != 1 {
		t.Fatalf("10 ms × 3 vs 25 ms × 1: picked %d", i)
	}

	// A fast failure costs the penalty.
	tb, c = newTestTable(1, 1)
	feed(tb, c, 0, 1, 100*time.Millisecond, 0, nil)
	feed(tb, c, 1, 1, time.Millisecond, 0, errors.New("connection refused"))
	if i, _ := s.Pick(tb, 0); i != 0 {
		t.Fatalf("100 ms vs a 1 ms failure: picked %d", i)
	}
}

// TestP2CEWMAShiftsAwayFromSlow runs Finagle's "slowmiddle" scenario: one
// of three upstreams turns 10× slower for 30 s. p2c_ewma moves traffic off it
// within a second and back within about τ of its recovery; round robin does
// not move it at all.
func TestP2CEWMAShiftsAwayFromSlow(t *testing.T) {
	servers := func() []simServer {
		return []simServer{
			{Workers: 8, Service: constant(10 * time.Millisecond), Jitter: true},
			{Workers: 8, Service: during(15*time.Second, 45*time.Second, 100*time.Millisecond, 10*time.Millisecond), Jitter: true},
			{Workers: 8, Service: constant(10 * time.Millisecond), Jitter: true},
		}
	}
	p2c := simulate(mustNew(t, "p2c_ewma"), servers(), 600, 90*time.Second, 7)
	rr := simulate(mustNew(t, "round_robin"), servers(), 600, 90*time.Second, 7)
	t.Logf("p2c_ewma, share of s0 s1 s2 by 5 s:\n%s", p2c.report())
	t.Logf("round_robin: p50 %v p99 %v", rr.quantile(0.5), rr.quantile(0.99))
	if sh := p2c.share(1, 0, 15); sh < 0.25 {
		t.Errorf("before the slowdown s1 had %.1f%%, want about a third", 100*sh)
	}
	if sh := p2c.share(1, 16, 45); sh > 0.08 {
		t.Errorf("while 10× slower s1 had %.1f%% under p2c_ewma", 100*sh)
	}
	if sh := p2c.share(1, 60, 90); sh < 0.25 {
		t.Errorf("15 s after recovery s1 had only %.1f%%", 100*sh)
	}
	if sh := rr.share(1, 16, 45); sh < 0.33 {
		t.Errorf("round robin gave s1 %.1f%%", 100*sh)
	}
	if p, r := p2c.quantile(0.99), rr.quantile(0.99); p*5 > r {
		t.Errorf("p99: p2c_ewma %v, round robin %v; want p2c_ewma far better", p, r)
	}
}

// TestP2CEWMAAvoidsFastFailures: an upstream that fails fast (in 1 ms) for
// 10 s would look like the fastest without the failure penalty.
func TestP2CEWMAAvoidsFastFailures(t *testing.T) {
	servers := []simServer{
		{Workers: 8, Service: constant(20 * time.Millisecond)},
		{Workers: 8, Service: constant(20 * time.Millisecond), Fail: func(now time.Duration) bool {
			return now >= 10*time.Second && now < 20*time.Second
		}},
		{Workers: 8, Service: constant(20 * time.Millisecond)},
	}
	run := simulate(mustNew(t, "p2c_ewma"), servers, 300, 30*time.Second, 3)
	if sh := run.share(1, 10, 20); sh > 0.02 {
		t.Fatalf("while failing fast s1 had %.1f%% of picks\n%s", 100*sh, run.report())
	}
}

func TestLeastConnAvoidsSlowInSimulation(t *testing.T) {
	servers := []simServer{
		{Workers: 8, Service: constant(10 * time.Millisecond)},
		{Workers: 8, Service: constant(100 * time.Millisecond)},
		{Workers: 8, Service: constant(10 * time.Millisecond)},
	}
	run := simulate(mustNew(t, "least_conn"), servers, 600, 30*time.Second, 5)
	if sh := run.share(1, 5, 30); sh > 0.15 {
		t.Fatalf("least_conn gave the 10× slower s1 %.1f%%\n%s", 100*sh, run.report())
	}
}

func TestRibbonWRTProportions(t *testing.T) {
	for _, tc := range []struct {
		lat   []time.Duration
		share []float64
	}{
		// w_i = Σ avg − avg_i: 50, 40, 30 of 120.
		{[]time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}, []float64{50. / 120, 40. / 120, 30. / 120}},
		// Two servers: inverse to latency, 30:10.
		{[]time.Duration{10 * time.Millisecond, 30 * time.Millisecond}, []float64{0.75, 0.25}},
		// The weak contrast beyond two: 110, 110, 20 of 240.
		{[]time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond}, []float64{110. / 240, 110. / 240, 20. / 240}},
	} {
		w := make([]int, len(tc.lat))
		for i := range w {
			w[i] = 1
		}
		tb, c := newTestTable(w...)
		s := mustNew(t, "ribbon_wrt")
		for i, l := range tc.lat {
			feed(tb, c, i, 10, l, 0, nil)
		}
		const n = 100000
		got := counts(picks(t, s, tb, n), len(tc.lat))
		for i, want := range tc.share {
			if sh := float64(got[i]) / n; math.Abs(sh-want) > 0.01 {
				t.Errorf("latencies %v: u%d got %.3f, want %.3f", tc.lat, i, sh, want)
			}
		}
	}
}

func TestRibbonWRTRefreshAndFallback(t *testing.T) {
	tb, c := newTestTable(1, 1)
	s := mustNew(t, "ribbon_wrt")
	// First pick: weights computed from no data, total 0 → round robin.
	if got := letters(picks(t, s, tb, 4)); got != "abab" {
		t.Fatalf("before any latency: %s, want round robin", got)
	}
	feed(tb, c, 0, 10, 10*time.Millisecond, 0, nil)
	feed(tb, c, 1, 10, 90*time.Millisecond, 0, nil)
	// Pick reads no clock: time reaches the strategy through the table's
	// own readings, here a probe, as the uplink's probe loop does.
	c.Advance(29 * time.Second)
	tb.Probe(0, time.Millisecond, nil)
	if got := letters(picks(t, s, tb, 4)); got != "abab" {
		t.Fatalf("before the 30 s refresh: %s, want round robin still", got)
	}
	c.Advance(time.Second)
	tb.Probe(0, time.Millisecond, nil)
	got := counts(picks(t, s, tb, 10000), 2)
	if got[0] < 8700 || got[0] > 9300 {
		t.Fatalf("after the refresh, 10 vs 90 ms: %v, want 90%%:10%%", got)
	}
	// A new upstream: round robin until the next refresh (Ribbon's server
	// count check), then it has average 0 and the largest weight.
	tb.Add("u2", 1)
	if got := letters(picks(t, s, tb, 3)); got != "cab" && got != "abc" && got != "bca" {
		t.Fatalf("after Add: %s, want round robin", got)
	}
	c.Advance(30 * time.Second)
	tb.Probe(0, time.Millisecond, nil)
	got = counts(picks(t, s, tb, 10000), 3)
	// avg 10, 90, 0: weights 90, 10, 100 of 200.
	if got[2] < 4700 || got[2] > 5300 || got[0] < 4200 || got[0] > 4800 {
		t.Fatalf("after the next refresh, avg 10, 90, 0: %v, want 45%%, 5%%, 50%%", got)
	}
	// The draw is over the candidates only.
	tb.SetUp(2, false)
	got = counts(picks(t, s, tb, 10000), 3)
	if got[2] != 0 || got[0] < 8700 {
		t.Fatalf("u2 down: %v, want 90%%:10%%:0", got)
	}
}

// TestNewTakesTheOptions: New hands each strategy its options, puts a
// "+outlier" name behind the outlier layer with opt.Outlier, and gives the
// one strategy with a model as a Trained.
func TestNewTakesTheOptions(t *testing.T) {
	drfOpt := DRFOptions{TR: DRFFactors{InFlight: 107.5, Latency: 152.5}, N: DRFFactors{InFlight: 2, Latency: 10}}
	s, err := New("drf", StrategyOptions{DRF: &drfOpt})
	if err != nil {
		t.Fatal(err)
	}
	if w := s.(*drfStrategy).Weights(); w != newDRF(drfOpt).Weights() || w == newDRF(DRFOptions{}).Weights() {
		t.Errorf("drf from New with options weighs %+v, want %+v", w, newDRF(drfOpt).Weights())
	}

	tuned := DRFCSWLCOptions{Decay: 1234 * time.Millisecond}
	if s, err = New("drf_cswlc", StrategyOptions{DRFCSWLC: &tuned}); err != nil {
		t.Fatal(err)
	}
	if got := s.(*drfCSWLC).opt.Decay; got != tuned.Decay {
		t.Errorf("drf_cswlc from New has decay %v, want %v", got, tuned.Decay)
	}

	if s, err = New("p2c_ewma+outlier", StrategyOptions{Outlier: OutlierOptions{Consecutive: 1}}); err != nil {
		t.Fatal(err)
	}
	o, ok := s.(*outlier)
	if !ok || o.consecutive != 1 || o.inner.Name() != "p2c_ewma" {
		t.Errorf("p2c_ewma+outlier from New: %T %+v", s, s)
	}
	if _, err := New("nope+outlier", StrategyOptions{}); !errors.Is(err, ErrUnknownStrategy) {
		t.Errorf("nope+outlier: %v, want ErrUnknownStrategy", err)
	}

	for _, name := range Names() {
		s, err := New(name, StrategyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, trained := s.(Trained); trained != (name == "irlb") {
			t.Errorf("%s: Trained %v", name, trained)
		}
	}
}
