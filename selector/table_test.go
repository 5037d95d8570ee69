package selector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAdd(t *testing.T) {
	tb, _ := newTestTable()
	if i := mustAdd(t, tb, "a", 0); i != 0 {
		t.Fatalf("first Add = %d", i)
	}
	if i := mustAdd(t, tb, "b", -3); i != 1 {
		t.Fatalf("second Add = %d", i)
	}
	if i := mustAdd(t, tb, "a", 7); i != 0 {
		t.Fatalf("Add of a name already there = %d, want its index 0", i)
	}
	if i := mustAdd(t, tb, "c", 2_000_000); i != 2 {
		t.Fatalf("third Add = %d", i)
	}
	s := tb.Snapshot()
	if s[0].Weight != 7 || s[1].Weight != 1 || s[2].Weight != maxWeight || s[1].Name != "b" || !s[1].Up {
		t.Fatalf("after Add: %+v", s)
	}
	if tb.Len() != 3 || tb.Candidates(0) != 0b111 || tb.Candidates(0b010) != 0b101 {
		t.Fatalf("Len %d, Candidates %#b", tb.Len(), tb.Candidates(0))
	}
}

func TestAddRetireReuse(t *testing.T) {
	tb, c := newTestTable()
	for i := range MaxUpstreams {
		tb.Add(fmt.Sprintf("u%d", i), 1)
	}
	mustBeFull(t, tb, "one too many")

	// A retired upstream with a delivery in flight.
	tk := tb.Begin(5)
	tb.Retire(5)
	tb.Retire(9)
	if tb.Candidates(0)&(1<<5|1<<9) != 0 {
		t.Fatalf("retired upstreams among the candidates: %#x", tb.Candidates(0))
	}
	// Its name comes back: same index, same statistics, up again.
	if i := mustAdd(t, tb, "u9", 3); i != 9 || tb.Candidates(0)&(1<<9) == 0 || tb.Snapshot()[9].Weight != 3 {
		t.Fatalf("re-Add of retired u9 = %d, candidates %#x", i, tb.Candidates(0))
	}
	// A new name takes the lowest retired slot.
	if i := mustAdd(t, tb, "new", 1); i != 5 {
		t.Fatalf("Add with every index used = %d, want retired slot 5", i)
	}
	c.Advance(time.Second)
	tb.End(tk, errors.New("late failure")) // ends on the old u5, not on "new"
	s := tb.Snapshot()[5]
	if s.Name != "new" || s.Failures != 0 || s.InFlight != 0 || s.Requests != 0 || s.Retired {
		t.Fatalf("the new upstream in slot 5 got the old one's end: %+v", s)
	}
	if tk.Index() != 5 || tk.Start() != testEpoch {
		t.Fatalf("ticket: index %d, start %v", tk.Index(), tk.Start())
	}
	mustBeFull(t, tb, "again too many")
}

func TestIndexOutOfRange(t *testing.T) {
	tb, _ := newTestTable(1, 1)
	for _, f := range []func(){
		func() { tb.Begin(2) },
		func() { tb.SetUp(-1, true) },
		func() { tb.Probe(64, 0, nil) },
		func() { tb.Report(3, Load{}) },
		func() { tb.Retire(2) },
		func() { tb.InFlight(2) },
	} {
		mustPanic(t, "index out of range", f)
	}
	tb.End(Ticket{}, nil) // a zero ticket is ignored
	if (Ticket{}).Index() != -1 {
		t.Fatal("zero Ticket's Index")
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("%s: no panic", what)
		}
		if msg, _ := r.(string); !strings.HasPrefix(msg, "selector: ") {
			t.Fatalf("%s: panic %v, want a selector: message", what, r)
		}
	}()
	f()
}

func TestLatencyStatistics(t *testing.T) {
	c := new(testClock)
	tb := NewTable(Options{Now: c.Now, Window: 4})
	tb.Add("a", 1)
	for _, ms := range []int{10, 20, 30, 40, 50} {
		tk := tb.Begin(0)
		c.Advance(time.Duration(ms) * time.Millisecond)
		tb.End(tk, nil)
	}
	s := tb.Snapshot()[0]
	ms := func(f float64) time.Duration { return time.Duration(math.Round(f * 1e6)) }
	for _, x := range []struct {
		what      string
		got, want time.Duration
	}{
		{"LastLatency", s.LastLatency, 50 * time.Millisecond},
		{"LatencyMean (window 20..50)", s.LatencyMean, 35 * time.Millisecond},
		{"LatencyStdDev (window, population)", s.LatencyStdDev, ms(math.Sqrt(125))},
		{"LifetimeMean", s.LifetimeMean, 30 * time.Millisecond},
		{"LifetimeStdDev (population)", s.LifetimeStdDev, ms(math.Sqrt(200))},
	} {
		if x.got != x.want {
			t.Errorf("%s = %v, want %v", x.what, x.got, x.want)
		}
	}
	if s.Samples != 4 || s.LifetimeSamples != 5 || s.Requests != 5 {
		t.Errorf("Samples %d, LifetimeSamples %d, Requests %d", s.Samples, s.LifetimeSamples, s.Requests)
	}
	// EWMA: the samples ended 20, 30, 40, 50 ms apart; w = e^(−Δt/10 s).
	want := 10.0
	for _, x := range []float64{20, 30, 40, 50} {
		w := math.Exp(-x / 10000)
		want = want*w + x*(1-w)
	}
	if got := float64(s.LatencyEWMA) / 1e6; math.Abs(got-want) > 1e-6 {
		t.Errorf("LatencyEWMA = %.6f ms, want %.6f ms", got, want)
	}
}

func TestWelfordMatchesTwoPass(t *testing.T) {
	c := new(testClock)
	tb := NewTable(Options{Now: c.Now, Window: 1000})
	tb.Add("a", 1)
	u := tb.ups[0].Load()
	for k := range 1000 {
		lat := time.Duration(1e6 + (k*7919)%100003*1000) // 1..101 ms, scrambled
		now := c.Now()
		tb.record(u, now.Add(-lat), now, nil)
	}
	wm, wsd := u.windowStats()
	lm, lsd := u.lifetime()
	if math.Abs(wm-lm) > 1e-6*wm || math.Abs(wsd-lsd) > 1e-6*wsd {
		t.Fatalf("Welford mean %.3f σ %.3f, two-pass mean %.3f σ %.3f", lm, lsd, wm, wsd)
	}
}

func TestFailures(t *testing.T) {
	tb, c := newTestTable(1)
	fail := errors.New("broker said no")
	end := func(err error) {
		tk := tb.Begin(0)
		c.Advance(100 * time.Millisecond)
		tb.End(tk, err)
	}
	end(fail)
	end(fail)
	end(fail) // at 0.1, 0.2, 0.3 s: one bucket, from 0.1 to 1.1 s
	s := tb.Snapshot()[0]
	if s.Failures != 3 || s.ConsecutiveFailures != 3 || s.FailuresLastSecond != 3 || s.Requests != 3 {
		t.Fatalf("3 failures: %+v", s)
	}
	if s.LastFailure != testEpoch.Add(300*time.Millisecond) || s.Timeouts != 0 {
		t.Fatalf("LastFailure %v, Timeouts %d", s.LastFailure, s.Timeouts)
	}
	end(nil)
	if s = tb.Snapshot()[0]; s.ConsecutiveFailures != 0 || s.Failures != 3 {
		t.Fatalf("a success: consecutive %d, failures %d", s.ConsecutiveFailures, s.Failures)
	}
	c.Advance(600 * time.Millisecond) // 1.0 s
	if s = tb.Snapshot()[0]; s.FailuresLastSecond != 3 {
		t.Fatalf("at 1.0 s: FailuresLastSecond %d, want 3", s.FailuresLastSecond)
	}
	c.Advance(100 * time.Millisecond) // 1.1 s: the bucket has ended
	if s = tb.Snapshot()[0]; s.FailuresLastSecond != 0 {
		t.Fatalf("at 1.1 s: FailuresLastSecond %d, want 0", s.FailuresLastSecond)
	}
	end(fmt.Errorf("publish: %w", context.DeadlineExceeded))
	end(&os.PathError{Op: "write", Path: "tcp", Err: os.ErrDeadlineExceeded})
	if s = tb.Snapshot()[0]; s.FailuresLastSecond != 2 || s.Timeouts != 2 || s.LastTimeout != testEpoch.Add(1300*time.Millisecond) {
		t.Fatalf("two timeouts: %+v", s)
	}

	// Canceled: only the in-flight count moves.
	tk := tb.Begin(0)
	c.Advance(time.Second)
	tb.End(tk, fmt.Errorf("shutting down: %w", context.Canceled))
	if s2 := tb.Snapshot()[0]; s2.Requests != s.Requests || s2.Failures != s.Failures || s2.InFlight != 0 || s2.LifetimeSamples != s.LifetimeSamples {
		t.Fatalf("a canceled delivery was recorded: %+v", s2)
	}
}

func TestProbeAndReport(t *testing.T) {
	c := new(testClock)
	tb := NewTable(Options{Now: c.Now, LoadTTL: 10 * time.Second})
	tb.Add("a", 1)
	tb.Probe(0, 0, errors.New("timeout"))
	if s := tb.Snapshot()[0]; s.ProbeRTT != 0 || s.ProbeFailures != 1 || s.ConsecutiveProbeFailures != 1 {
		t.Fatalf("a failed probe: %+v", s)
	}
	tb.Probe(0, 12*time.Millisecond, nil)
	c.Advance(3 * time.Second)
	if s := tb.Snapshot()[0]; s.ProbeRTT != 12*time.Millisecond || s.ProbeAge != 3*time.Second || s.ConsecutiveProbeFailures != 0 || s.ProbeFailures != 1 {
		t.Fatalf("a probe: %+v", s)
	}

	if s := tb.Snapshot()[0]; s.Load != nil || s.LoadAge != 0 {
		t.Fatalf("no report yet: %+v", s)
	}
	l := Load{CPU: 0.5, Memory: 0.25, DiskIO: 0.1, Network: 0.2, Processes: 120, Connections: 40, CPUMHz: 2400, MemoryMB: 4096, BandwidthMbps: 1000}
	l.At = c.Now().Add(-2 * time.Second)
	tb.Report(0, l)
	c.Advance(time.Second)
	s := tb.Snapshot()[0]
	if s.Load == nil || *s.Load != l || s.LoadAge != 3*time.Second {
		t.Fatalf("a fresh report: %+v, load %+v", s, s.Load)
	}
	c.Advance(7*time.Second + 1)
	if s = tb.Snapshot()[0]; s.Load != nil || s.LoadAge != 10*time.Second+1 {
		t.Fatalf("a stale report: load %+v, age %v", s.Load, s.LoadAge)
	}
	tb.Report(0, Load{CPU: 0.9}) // At zero: now
	if s = tb.Snapshot()[0]; s.Load == nil || s.Load.At != c.Now() || s.LoadAge != 0 {
		t.Fatalf("a report with no time: %+v", s.Load)
	}
}

func TestBeginEndDoNotAllocate(t *testing.T) {
	tb, c := newTestTable(1, 1)
	fail := errors.New("x")
	n := 0
	a := testing.AllocsPerRun(1000, func() {
		tk := tb.Begin(n % 2)
		c.Advance(time.Millisecond)
		var err error
		if n%5 == 0 {
			err = fail
		}
		tb.End(tk, err)
		n++
	})
	if a != 0 {
		t.Fatalf("Begin+End allocate %.1f times", a)
	}
}

func TestUnseededTable(t *testing.T) {
	tb := NewTable(Options{})
	for i := range 4 {
		tb.Add(fmt.Sprint(i), 1)
	}
	got := counts(picks(t, mustNew(t, "random"), tb, 4000), 4)
	for _, n := range got {
		if n < 800 {
			t.Fatalf("random with the runtime's generator: %v", got)
		}
	}
}

// TestConcurrentReuse gives slots to new upstreams while deliveries to the
// old ones begin and end; run it with -race. Every in-flight count must come
// back to 0.
func TestConcurrentReuse(t *testing.T) {
	tb := NewTable(Options{Seed: 3})
	for i := range MaxUpstreams {
		tb.Add(fmt.Sprintf("u%d", i), 1)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var open []Ticket
			for n := range 3000 {
				open = append(open, tb.Begin((g*17+n*7)%MaxUpstreams))
				if len(open) > 5 {
					tb.End(open[0], nil)
					open = open[1:]
				}
			}
			for _, tk := range open {
				tb.End(tk, errors.New("x"))
			}
		}()
	}
	for n := range 500 {
		i := n * 13 % MaxUpstreams
		tb.Retire(i)
		if got, err := tb.Add(fmt.Sprintf("new%d", n), 2); err != nil || got != i {
			t.Fatalf("Add after Retire(%d) = %d", i, got)
		}
	}
	wg.Wait()
	for _, s := range tb.Snapshot() {
		if s.InFlight != 0 {
			t.Fatalf("%s in slot %d: %d in flight after every delivery ended", s.Name, s.Index, s.InFlight)
		}
	}
}

// TestLatencyHistogram checks the cumulative bucket counts and the sum,
// including a latency on a bound and one above the last bound.
func TestLatencyHistogram(t *testing.T) {
	c := new(testClock)
	tb := NewTable(Options{Now: c.Now})
	tb.Add("a", 1)
	lat := []time.Duration{time.Millisecond, 5 * time.Millisecond, 7 * time.Millisecond, 300 * time.Millisecond, 40 * time.Second}
	for _, d := range lat {
		tk := tb.Begin(0)
		c.Advance(d)
		tb.End(tk, nil)
	}
	s := tb.Snapshot()[0]
	// Bounds: 5ms 10ms 25ms 50ms 100ms 250ms 500ms 1s 2.5s 5s 10s 30s.
	want := [len(LatencyBuckets)]uint64{2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4}
	if s.LatencyCumulative != want {
		t.Errorf("LatencyCumulative = %v, want %v", s.LatencyCumulative, want)
	}
	if wantSum := 40*time.Second + 313*time.Millisecond; s.LatencySum != wantSum {
		t.Errorf("LatencySum = %v, want %v", s.LatencySum, wantSum)
	}
	if s.LifetimeSamples != 5 {
		t.Errorf("LifetimeSamples = %d, want 5 (the +Inf bucket)", s.LifetimeSamples)
	}
}

// A 65th live upstream is refused with an error, and the table is unchanged:
// the registry or a reload must not crash the daemon.
func TestAddFullIsAnError(t *testing.T) {
	tb, _ := newTestTable()
	for i := range MaxUpstreams {
		mustAdd(t, tb, fmt.Sprintf("u%d", i), 1)
	}
	before := tb.Snapshot()
	mustBeFull(t, tb, "one too many")
	if after := tb.Snapshot(); len(after) != len(before) || tb.Candidates(0) != ^uint64(0) {
		t.Fatalf("a refused Add changed the table: %d upstreams, candidates %#x", len(after), tb.Candidates(0))
	}
	// A name already there is not a 65th: it updates its weight.
	if i := mustAdd(t, tb, "u3", 5); i != 3 || tb.Snapshot()[3].Weight != 5 {
		t.Fatalf("re-Add of u3 in a full table = %d", i)
	}
}

// A registry that churns its names, retiring what it drops before adding
// what it brings, never fills the table: retired slots are given to new
// names.
func TestAddChurnReusesRetiredSlots(t *testing.T) {
	tb, _ := newTestTable()
	idx := map[string]int{}
	for n := range 40 {
		idx[fmt.Sprintf("u%d", n)] = mustAdd(t, tb, fmt.Sprintf("u%d", n), 1)
	}
	for round := range 100 { // 100 lists of 40, each a quarter new
		for k := range 10 {
			old := fmt.Sprintf("u%d", round*10+k)
			tb.Retire(idx[old])
			delete(idx, old)
		}
		for k := range 10 {
			name := fmt.Sprintf("u%d", 40+round*10+k)
			idx[name] = mustAdd(t, tb, name, 1)
		}
		if tb.Len() > MaxUpstreams || len(idx) != 40 {
			t.Fatalf("round %d: Len %d, live %d", round, tb.Len(), len(idx))
		}
	}
	if got := bits.OnesCount64(tb.Candidates(0)); got != 40 {
		t.Fatalf("after the churn: %d candidates, want 40", got)
	}
}

func mustAdd(t *testing.T, tb *Table, name string, weight int) int {
	t.Helper()
	i, err := tb.Add(name, weight)
	if err != nil {
		t.Fatalf("Add(%q): %v", name, err)
	}
	return i
}

func mustBeFull(t *testing.T, tb *Table, name string) {
	t.Helper()
	i, err := tb.Add(name, 1)
	if !errors.Is(err, ErrFull) || i != -1 || !strings.Contains(err.Error(), name) {
		t.Fatalf("Add(%q) to a full table = %d, %v; want -1 and ErrFull naming it", name, i, err)
	}
}
