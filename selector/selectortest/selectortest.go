// Package selectortest is the conformance suite that every
// [selector.Strategy] passes, as testing/slogtest is for slog handlers.
//
//	func TestConformance(t *testing.T) {
//		selectortest.Run(t, func() selector.Strategy { return mystrategy.New() })
//	}
//
// The suite drives a [selector.Table] with a simulated clock and a fixed
// seed, and checks what the uplink relies on: a down, retired or skipped
// upstream is never picked; Pick says ok=false when nothing is pickable;
// load spreads over upstreams that are all alike; Pick does not allocate,
// is safe under concurrent use and, with a fixed seed, deterministic.
package selectortest

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/selector"
)

// Run runs the suite against strategies from newStrategy, which must return
// a fresh one each time: every subtest uses its own table and strategy.
func Run(t *testing.T, newStrategy func() selector.Strategy) {
	t.Helper()
	if newStrategy().Name() == "" {
		t.Fatal("Name() is empty")
	}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, func() selector.Strategy)
	}{
		{"Empty", testEmpty},
		{"OneUp", testOneUp},
		{"EdgeIndexes", testEdgeIndexes},
		{"DownNeverPicked", testDownNeverPicked},
		{"AllDown", testAllDown},
		{"Skip", testSkip},
		{"Retired", testRetired},
		{"Spread", testSpread},
		{"Deterministic", testDeterministic},
		{"NoAlloc", testNoAlloc},
		{"Concurrent", testConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStrategy) })
	}
}

// clock is a simulated clock, safe for concurrent use.
type clock struct{ ns atomic.Int64 }

var epoch = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func (c *clock) Now() time.Time          { return epoch.Add(time.Duration(c.ns.Load())) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// env is one table with n upstreams "u0"…, all up, weight 1, and its clock.
type env struct {
	*selector.Table
	clock *clock
	s     selector.Strategy
}

func newEnv(n int, s selector.Strategy) *env {
	c := new(clock)
	e := &env{Table: selector.NewTable(selector.Options{Now: c.Now, Seed: 0x5eed}), clock: c, s: s}
	for i := range n {
		if _, err := e.Add(fmt.Sprintf("u%d", i), 1); err != nil {
			panic(err) // n ≤ MaxUpstreams
		}
	}
	return e
}

// pick picks and checks the result against the table's own candidates.
func (e *env) pick(t *testing.T, skip uint64) (int, bool) {
	t.Helper()
	cand := e.Candidates(skip)
	i, ok := e.s.Pick(e.Table, skip)
	switch {
	case ok != (cand != 0):
		t.Fatalf("%s: Pick(skip=%#x) ok=%v with candidates %#x", e.s.Name(), skip, ok, cand)
	case ok && (i < 0 || i >= selector.MaxUpstreams || cand&(1<<i) == 0):
		t.Fatalf("%s: Pick(skip=%#x) = %d, not among candidates %#x", e.s.Name(), skip, i, cand)
	}
	return i, ok
}

// deliver picks, then runs one delivery of latency lat to the upstream
// picked (err as its outcome) and returns the index, or -1.
func (e *env) deliver(t *testing.T, skip uint64, lat time.Duration, err error) int {
	t.Helper()
	i, ok := e.pick(t, skip)
	if !ok {
		return -1
	}
	tk := e.Begin(i)
	e.clock.Advance(lat)
	e.End(tk, err)
	return i
}

var errDelivery = fmt.Errorf("selectortest: simulated delivery failure")

func testEmpty(t *testing.T, newStrategy func() selector.Strategy) {
	e := newEnv(0, newStrategy())
	if i, ok := e.pick(t, 0); ok {
		t.Fatalf("Pick on an empty table = %d, true", i)
	}
}

func testOneUp(t *testing.T, newStrategy func() selector.Strategy) {
	for k := range 5 {
		e := newEnv(5, newStrategy())
		// Give every upstream some history first, the up one the worst.
		for i := range 5 {
			tk := e.Begin(i)
			e.clock.Advance(time.Duration(10-i) * time.Millisecond)
			var err error
			if i == k {
				err = errDelivery
			}
			e.End(tk, err)
		}
		for i := range 5 {
			if i != k {
				e.SetUp(i, false)
			}
		}
		for n := range 200 {
			var err error
			if n%3 == 0 {
				err = errDelivery
			}
			if got := e.deliver(t, 0, time.Duration(1+n%50)*time.Millisecond, err); got != k {
				t.Fatalf("%s: only u%d up, picked %d", e.s.Name(), k, got)
			}
		}
	}
}

func testEdgeIndexes(t *testing.T, newStrategy func() selector.Strategy) {
	for _, k := range []int{0, 63} {
		e := newEnv(selector.MaxUpstreams, newStrategy())
		for i := range selector.MaxUpstreams {
			if i != k {
				e.SetUp(i, false)
			}
		}
		for range 100 {
			if got := e.deliver(t, 0, time.Millisecond, nil); got != k {
				t.Fatalf("%s: only u%d of 64 up, picked %d", e.s.Name(), k, got)
			}
		}
	}
	e := newEnv(selector.MaxUpstreams, newStrategy())
	seen := uint64(0)
	for range 64 * 200 {
		seen |= 1 << e.deliver(t, 0, time.Millisecond, nil)
	}
	if seen != ^uint64(0) {
		t.Fatalf("%s: 64 upstreams alike, some never picked: picked mask %#x", e.s.Name(), seen)
	}
}

func testDownNeverPicked(t *testing.T, newStrategy func() selector.Strategy) {
	e := newEnv(8, newStrategy())
	down := uint64(1<<1 | 1<<4 | 1<<6)
	for i := range 8 {
		if down&(1<<i) != 0 {
			e.SetUp(i, false)
		}
	}
	var counts [8]int
	for n := range 4000 {
		var err error
		if n%11 == 0 {
			err = errDelivery
		}
		i := e.deliver(t, 0, 10*time.Millisecond, err)
		counts[i]++
	}
	for i, c := range counts {
		if down&(1<<i) == 0 && c == 0 {
			t.Errorf("%s: u%d is up and was never picked in 4000 deliveries: %v", e.s.Name(), i, counts)
		}
	}
	// Bring one back and take another down, with deliveries in flight.
	tk := e.Begin(0)
	e.SetUp(4, true)
	e.SetUp(0, false)
	e.End(tk, nil)
	down = 1<<0 | 1<<1 | 1<<6
	for range 1000 {
		if i := e.deliver(t, 0, 10*time.Millisecond, nil); down&(1<<i) != 0 {
			t.Fatalf("%s: picked u%d, which is down", e.s.Name(), i)
		}
	}
}

func testAllDown(t *testing.T, newStrategy func() selector.Strategy) {
	e := newEnv(4, newStrategy())
	for range 20 {
		e.deliver(t, 0, 10*time.Millisecond, nil)
	}
	for i := range 4 {
		e.SetUp(i, false)
	}
	for range 10 {
		if i, ok := e.pick(t, 0); ok {
			t.Fatalf("%s: every upstream down, Pick = %d, true", e.s.Name(), i)
		}
	}
	e.SetUp(2, true)
	for range 50 {
		if i := e.deliver(t, 0, 10*time.Millisecond, nil); i != 2 {
			t.Fatalf("%s: only u2 back up, picked %d", e.s.Name(), i)
		}
	}
}

func testSkip(t *testing.T, newStrategy func() selector.Strategy) {
	e := newEnv(6, newStrategy())
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 5000 {
		if n%500 == 0 {
			e.SetUp(n/500%6, n/500%4 == 0) // take some down, bring some up
		}
		skip := r.Uint64() & (1<<6 - 1)
		if n%7 == 0 {
			skip |= r.Uint64() &^ (1<<6 - 1) // bits of no upstream do not matter
		}
		e.deliver(t, skip, time.Duration(1+r.IntN(20))*time.Millisecond, nil)
	}
	if i, ok := e.pick(t, ^uint64(0)); ok {
		t.Fatalf("%s: everything skipped, Pick = %d, true", e.s.Name(), i)
	}
	// Retrying one delivery: each attempt skips what was tried, until none is left.
	for i := range 6 {
		e.SetUp(i, true)
	}
	var tried uint64
	for range 6 {
		i, ok := e.pick(t, tried)
		if !ok {
			t.Fatalf("%s: %d of 6 tried, Pick found nothing", e.s.Name(), bits.OnesCount64(tried))
		}
		tried |= 1 << i
	}
	if i, ok := e.pick(t, tried); ok {
		t.Fatalf("%s: all 6 tried, Pick = %d, true", e.s.Name(), i)
	}
}

func testRetired(t *testing.T, newStrategy func() selector.Strategy) {
	e := newEnv(4, newStrategy())
	for range 40 {
		e.deliver(t, 0, 5*time.Millisecond, nil)
	}
	tk := e.Begin(2)
	e.Retire(2)
	for range 1000 {
		if i := e.deliver(t, 0, 5*time.Millisecond, nil); i == 2 {
			t.Fatalf("%s: picked u2, which is retired", e.s.Name())
		}
	}
	e.SetUp(2, true) // connection state does not bring a retired upstream back
	if i := e.deliver(t, 0, 5*time.Millisecond, nil); i == 2 {
		t.Fatalf("%s: picked u2, retired then set up", e.s.Name())
	}
	e.End(tk, nil) // an end after retirement is accepted
	if s := e.Snapshot()[2]; s.InFlight != 0 || !s.Retired {
		t.Fatalf("u2 after its last delivery ended: InFlight %d, Retired %v", s.InFlight, s.Retired)
	}
	for _, i := range []int{0, 1, 3} {
		e.Retire(i)
	}
	if i, ok := e.pick(t, 0); ok {
		t.Fatalf("%s: every upstream retired, Pick = %d, true", e.s.Name(), i)
	}
}

// testSpread checks that upstreams that are all alike each get a fair share
// (within half of 1/n either way), one delivery at a time and with many in
// flight.
func testSpread(t *testing.T, newStrategy func() selector.Strategy) {
	for _, n := range []int{2, 5, 16} {
		for _, depth := range []int{1, 8} {
			e := newEnv(n, newStrategy())
			counts := make([]int, n)
			var inflight []selector.Ticket
			const picks = 6000
			for range picks {
				i, _ := e.pick(t, 0)
				counts[i]++
				inflight = append(inflight, e.Begin(i))
				e.clock.Advance(10 * time.Millisecond / time.Duration(depth))
				if len(inflight) == depth {
					e.End(inflight[0], nil)
					inflight = inflight[1:]
				}
			}
			fair := float64(picks) / float64(n)
			for i, c := range counts {
				if float64(c) < fair/2 || float64(c) > fair*3/2 {
					t.Errorf("%s: %d alike upstreams, %d in flight: u%d got %d of %d picks (fair: %.0f): %v",
						e.s.Name(), n, depth, i, c, picks, fair, counts)
					break
				}
			}
		}
	}
}

// script drives a table through a varied run: unequal weights and
// latencies, failures, probes, load reports, an upstream going down and up,
// retries with skip masks, deliveries overlapping. It returns every pick.
func script(t *testing.T, s selector.Strategy) []int {
	c := new(clock)
	tb := selector.NewTable(selector.Options{Now: c.Now, Seed: 42})
	e := &env{Table: tb, clock: c, s: s}
	for i := range 6 {
		if _, err := e.Add(fmt.Sprintf("u%d", i), 1+i%3); err != nil {
			t.Fatal(err)
		}
	}
	var picks []int
	var inflight []selector.Ticket
	for n := range 3000 {
		if n%400 == 100 {
			e.SetUp(3, false)
		}
		if n%400 == 300 {
			e.SetUp(3, true)
		}
		if n%50 == 0 {
			e.Probe(n%6, time.Duration(1+n%13)*time.Millisecond, nil)
			e.Report(n%6, selector.Load{CPU: float64(n%10) / 10, Connections: n % 100})
		}
		var skip uint64
		if n%9 == 0 {
			skip = 1 << (n % 6)
		}
		i, ok := e.pick(t, skip)
		picks = append(picks, i)
		if !ok {
			continue
		}
		inflight = append(inflight, e.Begin(i))
		e.clock.Advance(time.Duration(1+i*i) * time.Millisecond)
		if len(inflight) > 4 {
			var err error
			if inflight[0].Index() == 5 && n%3 == 0 {
				err = errDelivery
			}
			e.End(inflight[0], err)
			inflight = inflight[1:]
		}
	}
	return picks
}

func testDeterministic(t *testing.T, newStrategy func() selector.Strategy) {
	a, b := script(t, newStrategy()), script(t, newStrategy())
	for k := range a {
		if a[k] != b[k] {
			t.Fatalf("%s: two runs with the same seed and clock differ at pick %d: %d then %d", newStrategy().Name(), k, a[k], b[k])
		}
	}
}

func testNoAlloc(t *testing.T, newStrategy func() selector.Strategy) {
	e := newEnv(16, newStrategy())
	for n := range 200 {
		e.deliver(t, 0, time.Duration(1+n%16)*time.Millisecond, nil)
	}
	e.clock.Advance(time.Minute) // past any periodic refresh, which may allocate once
	e.s.Pick(e.Table, 0)
	if a := testing.AllocsPerRun(1000, func() { e.s.Pick(e.Table, 1<<3) }); a != 0 {
		t.Fatalf("%s: Pick allocates %.1f times per call", e.s.Name(), a)
	}
}

// testConcurrent runs Pick, Begin and End from 8 goroutines while another
// takes an upstream down and up, probes, reports and snapshots; run it with
// -race.
func testConcurrent(t *testing.T, newStrategy func() selector.Strategy) {
	e := newEnv(6, newStrategy())
	e.Retire(2)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bad atomic.Value
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			var inflight []selector.Ticket
			for n := range 2000 {
				skip := uint64(1) << r.IntN(6)
				i, ok := e.s.Pick(e.Table, skip)
				if !ok {
					continue
				}
				if i == 2 || skip&(1<<i) != 0 || i < 0 || i >= 6 {
					bad.Store(fmt.Sprintf("picked %d with skip %#x (u2 retired)", i, skip))
					return
				}
				inflight = append(inflight, e.Begin(i))
				e.clock.Advance(time.Duration(r.IntN(1000)) * time.Microsecond)
				if len(inflight) > 3 || n == 1999 {
					for _, tk := range inflight {
						var err error
						if r.IntN(10) == 0 {
							err = errDelivery
						}
						e.End(tk, err)
					}
					inflight = inflight[:0]
				}
			}
			for _, tk := range inflight {
				e.End(tk, nil)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			e.SetUp(4, n%2 == 0)
			e.Probe(n%6, time.Duration(n%20)*time.Millisecond, nil)
			e.Report(n%6, selector.Load{CPU: 0.5})
			_ = e.Snapshot()
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	if msg := bad.Load(); msg != nil {
		t.Fatalf("%s: %s", e.s.Name(), msg)
	}
	for _, s := range e.Snapshot() {
		if s.InFlight != 0 {
			t.Fatalf("%s: after every delivery ended, u%d has %d in flight", e.s.Name(), s.Index, s.InFlight)
		}
	}
}
