package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"fieldlink/selector"
)

// clock is the simulated clock the tables read.
type clock struct{ ns int64 }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *clock) now() time.Time { return epoch.Add(time.Duration(c.ns)) }

// NewStrategy returns a strategy by name: any of selector.Names(), or one
// of them followed by "+outlier" for it behind the outlier ejection with
// Envoy's defaults (see selector.New), or "drf_cswlc:knob=value;…" for drf_cswlc with some of
// its constants set (see knobs; durations in milliseconds).
func NewStrategy(name string) (selector.Strategy, error) {
	if spec, ok := strings.CutPrefix(name, "drf_cswlc:"); ok {
		o, err := parseKnobs(spec)
		if err != nil {
			return nil, err
		}
		return selector.New("drf_cswlc", selector.StrategyOptions{DRFCSWLC: &o})
	}
	if name == "drf/5s" {
		// The paper re-scores every 5 minutes, longer than a lab run: this
		// variant re-scores every 5 s so that its factors get a say.
		return selector.New("drf", selector.StrategyOptions{DRF: &selector.DRFOptions{Period: 5 * time.Second}})
	}
	return selector.New(name, selector.StrategyOptions{})
}

// sim is one run in progress.
type sim struct {
	sc              *Scenario
	clk             clock
	q               eventQueue
	tables          []*selector.Table
	strats          []selector.Strategy
	rngs            []*rand.Rand // per gateway: arrivals and service draws only
	upstreams       []upstream
	pkts            []packet
	reqs            []request
	rtt             [][]int64 // [gateway][upstream], round trip in ns
	lat             []int64   // measured latencies, ns; failures count as Timeout
	latJoin         []int64   // latencies of the requests that arrived in the 10 s after a join
	ok, ok10s, ok1s int
	first, firstOK  int // measured packets whose first attempt ended, and of which succeeded
	retried         int // measured packets sent more than once
	single          bool
	seed            uint64

	// The delivery loop's state, per gateway (see uplink.Delivery).
	jit       []*rand.Rand // jitter of rests and backoffs
	cool      [][]int64    // [gateway][upstream]: resting until
	failRun   [][]int      // [gateway][upstream]: failures in a row
	buffered  [][]int32    // packets back in the buffer, waiting for a wake
	waking    []bool       // a wake is scheduled
	gwBackoff []int64      // the next backoff
	sent      []int        // measured requests sent to each upstream
	faultN    int          // requests picked within a fault window
	faultHit  int          // of which to the faulty upstream
	perSec    []int        // requests by second of the run
	perUp     [][]int      // [second][upstream] requests sent
	reconns   []int        // by second: gateways that saw the faulty upstream up again
	maxRate   float64
	baseRate  float64   // offered rate per gateway outside phases
	caps      []float64 // each upstream's capacity, requests per second
	events    int

	// Placement scenarios.
	conn      []int32   // per gateway: the upstream it is connected to, or -1
	pending   [][]int32 // per gateway: packets waiting for a connection
	backoff   []*rand.Rand
	orphan    []bool // per gateway: it lost its connection to a fault
	lastConn  int64  // time of the latest reconnection of an orphan
	beforeMax float64
}

// Simulate runs strategy (see [NewStrategy]) through scenario sc with seed.
// The arrivals, service times, round trips and report timings depend only
// on sc and seed, not on the strategy (common random numbers). The same
// arguments give the same Trial.
func Simulate(sc Scenario, strategy string, seed uint64) (Trial, error) {
	s, err := simulate(sc, strategy, seed)
	if err != nil {
		return Trial{}, err
	}
	return s.result(), nil
}

// simulate runs the simulation and returns its state at the end.
func simulate(sc Scenario, strategy string, seed uint64) (*sim, error) {
	if err := sc.validate(); err != nil {
		return nil, err
	}
	s := &sim{sc: &sc, single: sc.SingleAttempt, seed: seed}
	ng, nu := sc.Gateways, len(sc.Upstreams)
	topo := rand.New(rand.NewPCG(seed, 0x70b0))
	s.rtt = sc.RTT(topo, ng, nu)
	s.upstreams = make([]upstream, nu)
	s.sent = make([]int, nu)
	secs := int(sc.Duration/time.Second) + 1
	s.perSec = make([]int, secs)
	s.perUp = make([][]int, secs)
	s.reconns = make([]int, secs)
	for k := range s.perUp {
		s.perUp[k] = make([]int, nu)
	}
	for i, up := range sc.Upstreams {
		s.upstreams[i].joined = up.JoinAt == 0
	}
	for range ng {
		st, err := NewStrategy(strategy)
		if err != nil {
			return nil, err
		}
		t := selector.NewTable(selector.Options{Now: s.clk.now, Seed: seed*1_000_003 + uint64(len(s.tables)) + 1})
		for i, up := range sc.Upstreams {
			if up.JoinAt == 0 {
				if _, err := t.Add(fmt.Sprintf("s%d", i), up.Workers); err != nil {
					return nil, fmt.Errorf("lab: scenario %s: %w", sc.Name, err)
				}
			}
		}
		s.tables = append(s.tables, t)
		s.strats = append(s.strats, st)
		s.rngs = append(s.rngs, rand.New(rand.NewPCG(seed, uint64(len(s.rngs))+1)))
		// Jitter draws depend on the strategy's failures: their own stream.
		s.jit = append(s.jit, rand.New(rand.NewPCG(seed, 0x717e<<20|uint64(len(s.jit)))))
		s.cool = append(s.cool, make([]int64, nu))
		s.failRun = append(s.failRun, make([]int, nu))
		s.gwBackoff = append(s.gwBackoff, int64(firstBackoff))
	}
	s.buffered = make([][]int32, ng)
	s.waking = make([]bool, ng)
	for i, up := range sc.Upstreams {
		if up.JoinAt > 0 {
			s.q.push(event{at: int64(up.JoinAt), kind: evJoin, a: int32(i)})
		}
	}
	if sc.Placement != nil {
		s.conn = make([]int32, ng)
		s.pending = make([][]int32, ng)
		s.orphan = make([]bool, ng)
		for g := range ng {
			s.conn[g] = -1
			// Backoff draws: a stream per gateway, apart from the arrivals.
			s.backoff = append(s.backoff, rand.New(rand.NewPCG(seed, 0xbac0ff<<20|uint64(g))))
		}
		s.beforeMax = math.NaN()
	}
	for _, up := range sc.Upstreams {
		s.caps = append(s.caps, up.capacity())
	}
	// Offered rate per gateway at its peak, for thinning.
	s.baseRate = sc.Load * sc.capacity() / float64(ng)
	s.maxRate = s.baseRate
	peak := 1.0
	for _, p := range sc.Phases {
		peak = max(peak, p.Factor)
	}
	s.maxRate *= peak

	for g := range ng {
		start := int64(0)
		probe, refresh := int64(0), int64(0)
		if sc.Jitter {
			start = int64(topo.Float64() * float64(sc.StartSpread))
			probe = int64(topo.Float64() * float64(sc.ProbeInterval))
			refresh = int64(topo.Float64() * float64(sc.RefreshInterval))
		}
		s.q.push(event{at: start + s.nextGap(g), kind: evArrival, a: int32(g)})
		if sc.Placement != nil {
			s.q.push(event{at: start, kind: evConnect, a: int32(g)})
		}
		s.q.push(event{at: probe, kind: evProbe, a: int32(g)})
		if sc.Reports {
			s.q.push(event{at: refresh, kind: evRefresh, a: int32(g)})
		}
	}
	if sc.Reports && sc.ReportAge > 0 {
		s.q.push(event{at: 0, kind: evSample})
	}
	for k, f := range sc.Faults {
		s.q.push(event{at: int64(f.From), kind: evFault, a: int32(k)})
		if f.To > 0 {
			s.q.push(event{at: int64(f.To), kind: evFault, a: int32(k), b: 1})
		}
	}
	end := int64(sc.Duration + sc.Deadline + sc.Timeout + time.Second)
	for s.q.len() > 0 {
		e := s.q.pop()
		if e.at > end {
			break
		}
		s.clk.ns = e.at
		s.events++
		s.handle(e)
	}
	// What is still undelivered missed its deadline.
	for k := range s.pkts {
		s.settle(&s.pkts[k], end, false)
	}
	return s, nil
}
