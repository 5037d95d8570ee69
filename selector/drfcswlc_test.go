package selector

import (
	"errors"
	"math/bits"
	"testing"
	"time"
)

// timeoutErr is a delivery that timed out, as the uplink's errors say.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// dcTable is four upstreams of equal weight that each answered 20
// deliveries in 20 ms, and a fresh drf_cswlc.
func dcTable(t *testing.T, opt DRFCSWLCOptions) (*Table, *testClock, *drfCSWLC) {
	t.Helper()
	tb, c := newTestTable(1, 1, 1, 1)
	for i := range 4 {
		feed(tb, c, i, 20, 20*time.Millisecond, time.Millisecond, nil)
	}
	s := newDRFCSWLC(opt)
	s.Pick(tb, 0) // it sees them: their warm-up starts
	tick(tb, c, 10*time.Second)
	return tb, c, s
}

// dcPicks counts the picks of each upstream over n picks, ending each at once
// so that in-flight counts stay as they are.
func dcPicks(tb *Table, s Strategy, n int) [4]int {
	var got [4]int
	for range n {
		i, ok := s.Pick(tb, 0)
		if ok {
			got[i]++
		}
	}
	return got
}

// tick advances the clock and lets the table see it (a probe of every
// upstream, 20 ms like their deliveries), so that the strategy's next pick
// recomputes.
func tick(tb *Table, c *testClock, d time.Duration) {
	c.Advance(d)
	for i := range tb.Len() {
		tb.Probe(i, 20*time.Millisecond, nil)
	}
}

func TestDRFCSWLCSpreadsEqualUpstreams(t *testing.T) {
	tb, _, s := dcTable(t, DRFCSWLCOptions{})
	got := dcPicks(tb, s, 4000)
	for i, n := range got {
		if n < 700 || n > 1300 {
			t.Errorf("upstream %d got %d of 4000 picks of four equal upstreams: %v", i, n, got)
		}
	}
}

// Deliveries pending with none ending (a black hole) eject the upstream
// long before the first timeout.
func TestDRFCSWLCEjectsAStall(t *testing.T) {
	tb, c, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	// u2 has two deliveries pending and none ending; the others three each,
	// but theirs keep ending: by in-flight alone, u2 would be the pick.
	tb.Begin(2)
	tb.Begin(2)
	for i := range 4 {
		if i != 2 {
			tb.Begin(i)
			tb.Begin(i)
			tb.Begin(i)
		}
	}
	for range 2 {
		tick(tb, c, 500*time.Millisecond) // > MinStall (250 ms), > 5 × 20 ms, > the interval
		for _, i := range []int{0, 1, 3} {
			feed(tb, c, i, 1, 20*time.Millisecond, time.Millisecond, nil)
		}
		s.Pick(tb, 0) // recomputes
	}
	if got := dcPicks(tb, s, 1000); got[2] != 0 {
		t.Errorf("a stalled upstream still got %d of 1000 picks: %v", got[2], got)
	}
}

// An upstream that answers errors at once (a sinkhole) is ejected after
// FailuresToEject of them: a fast failure is never fast.
func TestDRFCSWLCEjectsASinkhole(t *testing.T) {
	tb, c, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	feed(tb, c, 1, 2, time.Millisecond, time.Millisecond, errors.New("500"))
	tick(tb, c, 500*time.Millisecond)
	if got := dcPicks(tb, s, 1000); got[1] != 0 {
		t.Errorf("a sinkhole still got %d of 1000 picks: %v", got[1], got)
	}
	// The ejection ends (1 s ± 20%), and the upstream warms up again.
	tick(tb, c, 1500*time.Millisecond)
	tick(tb, c, 10*time.Second)
	if got := dcPicks(tb, s, 4000); got[1] < 500 {
		t.Errorf("after its ejection the upstream got %d of 4000 picks: %v", got[1], got)
	}
}

// A timeout ejects at once; at most half the upstreams are ejected.
func TestDRFCSWLCEjectsAtMostHalf(t *testing.T) {
	tb, c, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	for i := range 3 {
		feed(tb, c, i, 1, 10*time.Second, time.Millisecond, timeoutErr{})
	}
	tick(tb, c, 500*time.Millisecond)
	s.Pick(tb, 0)
	if hot := s.ref.published().hot.Load(); bits.OnesCount64(hot) != 2 || hot&(1<<3) != 0 {
		t.Errorf("three of four timed out: ejected %04b, want two of u0–u2", hot)
	}
}

// An upstream that joins starts at a tenth of its chance of a pick and ramps up over
// WarmUp: no stampede onto the newcomer, which an idle upstream would be
// for least connections.
func TestDRFCSWLCWarmsUpAJoiner(t *testing.T) {
	tb, c, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	j, err := tb.Add("joiner", 1)
	if err != nil {
		t.Fatal(err)
	}
	tick(tb, c, 500*time.Millisecond)
	// In flight one each on the others: the joiner, idle, would win every
	// pick of a plain least-connections scan.
	for i := range 4 {
		tb.Begin(i)
	}
	var early int
	for range 1000 {
		if i, _ := s.Pick(tb, 0); i == j {
			early++
		}
	}
	// A pick's chances go as (W/(in-flight+1))^3 (Spread 1/3, see scan):
	// 1/8 for each of the others, at most the warm-up factor (0.1 to 0.41
	// in the first 500 ms) for the joiner, so at most 0.41/0.91 of the
	// picks, where a plain least-connections scan gives it every pick.
	if early > 450 {
		t.Errorf("the joiner got %d of 1000 picks in its first 500 ms, want at most 450", early)
	}
	tick(tb, c, 5*time.Second)
	var late int
	for range 1000 {
		if i, _ := s.Pick(tb, 0); i == j {
			late++
		}
	}
	// Idle against four with one in flight: 1 against 1/8 each, 2/3.
	if late < 600 {
		t.Errorf("once warm, the idle joiner got %d of 1000 picks, want most (the others have one in flight)", late)
	}
}

// A slower upstream weighs less, and its estimate returns toward its probe
// round trip without deliveries, so that it is tried again.
func TestDRFCSWLCLatencyWeighsAndDecays(t *testing.T) {
	tb, c, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	feed(tb, c, 0, 20, 2*time.Second, time.Millisecond, nil)
	tick(tb, c, 500*time.Millisecond)
	for i := 1; i < 4; i++ {
		tb.Begin(i) // the fast ones busier than the slow one
	}
	// Its weight is about 1/80 of the others' (2 s against their 20 ms
	// probes, + 5 ms each): its chance against each is (2/80)^3.
	if got := dcPicks(tb, s, 1000); got[0] > 5 {
		t.Errorf("a 100× slower upstream got %d of 1000 picks against one in flight elsewhere, want at most 5: %v", got[0], got)
	}
	for range 20 {
		tick(tb, c, time.Second) // 20 decay constants of 3 s... almost 7
	}
	// Idle against three with one in flight: 1 against 1/8 each, 0.73.
	if got := dcPicks(tb, s, 1000); got[0] < 600 {
		t.Errorf("after its estimate decayed the idle upstream got %d of 1000 picks, want most: %v", got[0], got)
	}
}

// While its latest probe fails, a slow upstream's estimate holds: the round
// trip the last answered probe gave may be from before it turned slow.
// Once a probe answers again, it decays as before.
func TestDRFCSWLCHoldsWhileProbesFail(t *testing.T) {
	tb, c, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	feed(tb, c, 0, 20, 2*time.Second, time.Millisecond, nil)
	tick(tb, c, 500*time.Millisecond)
	timeout := errors.New("probe timeout")
	for range 20 {
		tick(tb, c, time.Second)
		tb.Probe(0, 0, timeout)
		s.Pick(tb, 0) // recompute
	}
	if got := dcPicks(tb, s, 1000); got[0] > 5 {
		t.Errorf("with its probes failing, the slow upstream got %d of 1000 picks after 20 s, want at most 5: %v", got[0], got)
	}
	for range 20 {
		tick(tb, c, time.Second)
		s.Pick(tb, 0)
	}
	// Back to the others' estimate: a fair share, 250 of 1000.
	if got := dcPicks(tb, s, 1000); got[0] < 150 {
		t.Errorf("once its probes answered, the upstream got %d of 1000 picks, want about a fair share (250): %v", got[0], got)
	}
}

// A probe that saw an upstream slow (here, it failed) is believed at once
// when it answers fast again: the upstream gets picks at the next
// recomputation, not after its estimate decayed.
func TestDRFCSWLCBelievesAProbeThatSawTheSlowness(t *testing.T) {
	tb, c, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	feed(tb, c, 0, 20, 2*time.Second, time.Millisecond, nil)
	for range 3 { // a recomputation at least every 375 ms
		tick(tb, c, 400*time.Millisecond)
		tb.Probe(0, 0, errors.New("probe timeout"))
		s.Pick(tb, 0)
	}
	if got := dcPicks(tb, s, 1000); got[0] > 5 {
		t.Errorf("while slow, the upstream got %d of 1000 picks, want at most 5: %v", got[0], got)
	}
	tick(tb, c, 400*time.Millisecond) // every probe answers in 20 ms
	if got := dcPicks(tb, s, 1000); got[0] < 150 {
		t.Errorf("a probe that had failed answers fast: the upstream got %d of 1000 picks, want about a fair share (250)", got[0])
	}
}

func TestDRFCSWLCPickDoesNotAllocate(t *testing.T) {
	tb, _, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	if n := testing.AllocsPerRun(1000, func() { s.Pick(tb, 0) }); n != 0 {
		t.Errorf("Pick allocates %v times", n)
	}
}

// A delivery that began while the upstream was slow and ends after a probe
// was believed (it saw the upstream fast again) measures the upstream before
// it recovered: it does not make it slow again. Otherwise nothing would undo
// it before the next probe (10 s by default, the upstream no longer
// troubled) and the estimate's decay: with the pick's chances as
// (W/(in-flight+1))^3, the recovered node had no traffic for 15–22 s.
func TestDRFCSWLCBelievedProbeOutlivesALateDelivery(t *testing.T) {
	for _, same := range []bool{false, true} { // it ends after the probe's recomputation, or before it
		lateDeliveryAfterAFastProbe(t, same)
	}
}

func lateDeliveryAfterAFastProbe(t *testing.T, same bool) {
	tb, c, s := dcTable(t, DRFCSWLCOptions{})
	s.Pick(tb, 0)
	feed(tb, c, 0, 20, 1200*time.Millisecond, time.Millisecond, nil)
	for range 3 { // a recomputation at least every 375 ms
		tick(tb, c, 400*time.Millisecond)
		tb.Probe(0, 0, errors.New("probe timeout"))
		s.Pick(tb, 0)
	}
	late := tb.Begin(0) // sent while slow: its ack comes 1.2 s later
	if same {
		c.Advance(800 * time.Millisecond)
		tb.End(late, nil)
	}
	tick(tb, c, 400*time.Millisecond) // every probe answers in 20 ms
	s.Pick(tb, 0)                     // believed
	if !same {
		c.Advance(800 * time.Millisecond)
		tb.End(late, nil)
	}
	c.Advance(400 * time.Millisecond) // no probe until the next interval
	if got := dcPicks(tb, s, 1000); got[0] < 150 {
		t.Errorf("a delivery begun before the upstream recovered ended with its fast probe (in its recomputation: %v): the upstream got %d of 1000 picks, want about a fair share (250): %v", same, got[0], got)
	}
}

// A probe that finds an ejected upstream back (believed after it saw the
// slowness, or answering after failures) ends its ejection, as a passing
// active health check does in Envoy: an ejection doubled by the faults
// before (here the first one, made 30 s long) otherwise kept a recovered
// node out for up to 36 s, whatever its probes said.
func TestDRFCSWLCProbeEndsAnEjection(t *testing.T) {
	for _, failing := range []bool{true, false} { // a black hole's probes, a slow node's
		tb, c, s := dcTable(t, DRFCSWLCOptions{Eject: 30 * time.Second})
		s.Pick(tb, 0)
		if !failing {
			feed(tb, c, 0, 20, 1200*time.Millisecond, time.Millisecond, nil)
		}
		feed(tb, c, 0, 1, 10*time.Second, time.Millisecond, timeoutErr{}) // ejected, 24 s at least
		for range 3 {
			tick(tb, c, 400*time.Millisecond)
			if failing {
				tb.Probe(0, 0, errors.New("probe timeout"))
			} else {
				tb.Probe(0, 1200*time.Millisecond, nil)
			}
			s.Pick(tb, 0)
		}
		if got := dcPicks(tb, s, 1000); got[0] != 0 {
			t.Fatalf("ejected, the upstream got %d of 1000 picks", got[0])
		}
		tick(tb, c, 400*time.Millisecond) // every probe answers in 20 ms
		s.Pick(tb, 0)
		for range 10 { // past WarmUp, no probe of u0 since
			c.Advance(400 * time.Millisecond)
			for i := 1; i < 4; i++ {
				tb.Probe(i, 20*time.Millisecond, nil)
			}
			s.Pick(tb, 0)
		}
		if got := dcPicks(tb, s, 1000); got[0] < 150 {
			t.Errorf("probes failing %v, then answering fast: 4 s later the upstream got %d of 1000 picks, want about a fair share (250): %v", failing, got[0], got)
		}
	}
}
