package selector

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a simulated clock, safe for concurrent use.
type testClock struct{ ns atomic.Int64 }

var testEpoch = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func (c *testClock) Now() time.Time          { return testEpoch.Add(time.Duration(c.ns.Load())) }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *testClock) Set(d time.Duration)     { c.ns.Store(int64(d)) }

// newTestTable returns a table on a simulated clock with a fixed seed and
// upstreams "u0"… of the given weights.
func newTestTable(weights ...int) (*Table, *testClock) {
	c := new(testClock)
	t := NewTable(Options{Now: c.Now, Seed: 1})
	for i, w := range weights {
		t.Add(fmt.Sprintf("u%d", i), w)
	}
	return t, c
}

func mustNew(t testing.TB, name string) Strategy {
	t.Helper()
	s, err := New(name, StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// simServer is a simulated upstream: a FIFO queue in front of Workers
// workers, each delivery taking Service(now) (times a lognormal jitter of
// σ = 0.2 when Jitter), failing when Fail(now).
type simServer struct {
	Workers int
	Service func(now time.Duration) time.Duration
	Fail    func(now time.Duration) bool
	Jitter  bool
}

// constant returns a service time function that does not change.
func constant(d time.Duration) func(time.Duration) time.Duration {
	return func(time.Duration) time.Duration { return d }
}

// during returns a service time function that is slow in [from, to) and
// fast otherwise.
func during(from, to, slow, fast time.Duration) func(time.Duration) time.Duration {
	return func(now time.Duration) time.Duration {
		if now >= from && now < to {
			return slow
		}
		return fast
	}
}

// simRun is what a simulation saw.
type simRun struct {
	Picks   [][]int         // per second, per upstream
	Latency []time.Duration // of every delivery, in order of arrival
	Dropped int             // arrivals with nothing to pick
}

// share is the fraction of picks that went to upstream i in seconds [from, to).
func (r simRun) share(i, from, to int) float64 {
	var mine, all int
	for _, sec := range r.Picks[from:to] {
		mine += sec[i]
		for _, n := range sec {
			all += n
		}
	}
	return float64(mine) / float64(all)
}

// quantile is the q-quantile of the delivery latencies.
func (r simRun) quantile(q float64) time.Duration {
	l := slices.Clone(r.Latency)
	slices.Sort(l)
	return l[int(q*float64(len(l)-1))]
}

// simEvent is a delivery ending.
type simEvent struct {
	at time.Duration
	tk Ticket
	ok bool
}

type simEvents []simEvent

func (h simEvents) Len() int           { return len(h) }
func (h simEvents) Less(i, j int) bool { return h[i].at < h[j].at }
func (h simEvents) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simEvents) Push(x any)        { *h = append(*h, x.(simEvent)) }
func (h *simEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// simulate runs strategy s against servers in simulated time for length,
// with Poisson arrivals at rate per second. It is deterministic for a seed.
func simulate(s Strategy, servers []simServer, rate float64, length time.Duration, seed uint64) simRun {
	c := new(testClock)
	t := NewTable(Options{Now: c.Now, Seed: seed})
	free := make([][]time.Duration, len(servers)) // when each worker is next free
	for i, sv := range servers {
		t.Add(fmt.Sprintf("s%d", i), 1)
		free[i] = make([]time.Duration, sv.Workers)
	}
	r := rand.New(rand.NewPCG(seed, 99))
	run := simRun{Picks: make([][]int, int(length/time.Second)+1)}
	for k := range run.Picks {
		run.Picks[k] = make([]int, len(servers))
	}
	var ends simEvents
	next := time.Duration(0)
	for next < length {
		// Deliveries that end before the next arrival end first.
		for len(ends) > 0 && ends[0].at <= next {
			e := heap.Pop(&ends).(simEvent)
			c.Set(e.at)
			var err error
			if !e.ok {
				err = fmt.Errorf("simulated failure")
			}
			t.End(e.tk, err)
		}
		c.Set(next)
		arrival := next
		next += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
		i, ok := s.Pick(t, 0)
		if !ok {
			run.Dropped++
			continue
		}
		run.Picks[int(arrival/time.Second)][i]++
		tk := t.Begin(i)
		sv := servers[i]
		service := sv.Service(arrival)
		if sv.Jitter {
			service = time.Duration(float64(service) * math.Exp(0.2*r.NormFloat64()))
		}
		ok = sv.Fail == nil || !sv.Fail(arrival)
		if !ok {
			service = time.Millisecond // fails fast
		}
		w := slices.Index(free[i], slices.Min(free[i]))
		start := max(arrival, free[i][w])
		free[i][w] = start + service
		end := start + service
		run.Latency = append(run.Latency, end-arrival)
		heap.Push(&ends, simEvent{at: end, tk: tk, ok: ok})
	}
	return run
}

// report formats the shares of each upstream by 5 s window, for logs.
func (r simRun) report() string {
	var b strings.Builder
	for from := 0; from+5 <= len(r.Picks); from += 5 {
		fmt.Fprintf(&b, "%3d-%3ds:", from, from+5)
		for i := range r.Picks[0] {
			fmt.Fprintf(&b, " %5.1f%%", 100*r.share(i, from, from+5))
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "p50 %v p99 %v p99.9 %v", r.quantile(0.5), r.quantile(0.99), r.quantile(0.999))
	return b.String()
}

// TestSimulationSummary runs every strategy through Finagle's "slowmiddle"
// scenario (one of three upstreams 10× slower from 15 s to 45 s) and logs
// how each fared; go test -v -run Summary shows the table. The lab proper
// compares strategies over many seeds and scenarios.
func TestSimulationSummary(t *testing.T) {
	servers := []simServer{
		{Workers: 8, Service: constant(10 * time.Millisecond), Jitter: true},
		{Workers: 8, Service: during(15*time.Second, 45*time.Second, 100*time.Millisecond, 10*time.Millisecond), Jitter: true},
		{Workers: 8, Service: constant(10 * time.Millisecond), Jitter: true},
	}
	p99 := map[string]time.Duration{}
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %10s %10s %10s %14s\n", "strategy", "p50", "p99", "p99.9", "slow share")
	for _, name := range Names() {
		run := simulate(mustNew(t, name), servers, 600, 60*time.Second, 11)
		p99[name] = run.quantile(0.99)
		fmt.Fprintf(&b, "%-22s %10v %10v %10v %13.1f%%\n", name,
			run.quantile(0.5).Round(time.Microsecond), p99[name].Round(time.Microsecond),
			run.quantile(0.999).Round(time.Microsecond), 100*run.share(1, 16, 45))
	}
	t.Logf("slowmiddle, 600/s Poisson, 60 s:\n%s", b.String())
	if p99["p2c_ewma"] > p99["round_robin"] {
		t.Errorf("p2c_ewma p99 %v worse than round_robin's %v", p99["p2c_ewma"], p99["round_robin"])
	}
}
