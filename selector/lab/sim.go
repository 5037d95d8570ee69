package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"fieldlink/selector"
)

// event kinds.
const (
	evArrival   = iota // a = gateway: a request should be sent now
	evReach            // a = request: it reaches its server
	evDone             // a = request: its server finished serving it
	evResponse         // a = request, b = 1 when failed: the gateway hears back
	evTimeout          // a = request: the gateway gives up on it
	evProbe            // a = gateway: probe every upstream
	evRefresh          // a = gateway: read every upstream's load report
	evSample           // servers record their state, for aged reports
	evFault            // a = index into the scenario's faults, b = 1 at its end
	evReconnect        // a = server: gateways see it up again
	evJoin             // a = server: it joins every gateway's table
	evConnect          // a = gateway: it connects (Placement scenarios)
)

// event is one thing that happens at a virtual time. Events at the same
// time happen in the order they were scheduled (seq), so a run is
// deterministic.
type event struct {
	at   int64
	seq  uint64
	kind uint8
	b    uint8
	a    int32
}

// eventQueue is a binary min-heap of events by (at, seq). It stores values,
// not interfaces, so that scheduling an event does not allocate once the
// heap has grown.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) less(i, j int) bool {
	if q.h[i].at != q.h[j].at {
		return q.h[i].at < q.h[j].at
	}
	return q.h[i].seq < q.h[j].seq
}

// push schedules e; its seq is assigned here.
func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// pop removes and returns the earliest event; the queue is not empty.
func (q *eventQueue) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h = q.h[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}

func (q *eventQueue) len() int { return len(q.h) }

// timeoutError is the error a delivery ends with when the gateway gave up
// waiting: the table counts it as a timeout.
type timeoutError struct{}

func (timeoutError) Error() string { return "lab: delivery timed out" }
func (timeoutError) Timeout() bool { return true }

// refusedError is a fast failure: connection refused or reset.
type refusedError struct{}

func (refusedError) Error() string { return "lab: connection refused" }

var (
	errTimeout = timeoutError{}
	errRefused = refusedError{}
)

// request is one delivery.
type request struct {
	gw, srv  int32
	t0       int64   // when it should have been sent (its arrival)
	z        float64 // standard normal draw of its service time
	tk       selector.Ticket
	finished bool
	measured bool
}

// server is an upstream's run-time state.
type server struct {
	busy    int
	queue   []int32 // waiting requests, FIFO
	head    int
	busyNs  int64 // worker-ns of service within the measured window
	mode    Fault // current fault mode; FaultNone when healthy
	samples []sample
	joined  bool // in the gateways' tables (JoinAt passed)
	conns   int  // gateways connected to it (Placement scenarios)
}

type sample struct {
	at                 int64
	util               float64
	queued, bsy, conns int
}

// Trial is what one simulation of one strategy in one scenario with one seed
// measured, over the requests that arrived in the measured window
// [Warmup, Duration).
type Trial struct {
	Requests    int
	Mean        float64 // seconds; a failed request counts as the timeout
	P50         float64
	P99         float64
	P999        float64
	Success     float64 // fraction answered without error within the timeout
	Success1s   float64 // fraction answered without error within 1 s
	FaultyShare float64 // fraction of the fault window's requests sent to the faulty server; NaN when the scenario has none
	Jain        float64 // Jain's index over capacity-normalised utilisation
	// Share is the faulty server's share of each second's requests, by
	// second of the run (nil when the scenario has no faulty server).
	Share []float64
	// Events is how many events the run processed.
	Events int

	// Osc is the oscillation: the mean change of a server's share of the
	// requests from one 1 s bin to the next, |share(t) − share(t−1)|, over
	// the measured window, averaged over the servers other than the faulty
	// or joining one. NaN in Placement scenarios.
	Osc float64
	// SettleFault and SettleRecovery are the convergence times, seconds,
	// after the faulty server's faults start and end (see [settle]), the
	// mean over the run's faults; +Inf when one of them never settled, NaN
	// when the scenario has none.
	SettleFault, SettleRecovery float64

	// Cold join (a server with a JoinAt, the Faulty one).
	JoinSettle float64 // settle time after the join, towards its share over the run's last 20 s; +Inf never
	JoinRamp   float64 // seconds until its share of a 1 s bin first reaches half its capacity share; +Inf never
	JoinPeak   float64 // its largest share of a 1 s bin in the 5 s after the join, over its capacity share
	JoinP99    float64 // p99 of the requests that arrived in the 10 s after the join, seconds

	// Placement (connections): the balance of connections per broker
	// against capacity, x_b = connections_b / capacity share_b, over the
	// brokers up at the end of the run.
	PlaceBefore float64 // max x_b / mean x_b just before the fault, over every broker
	PlaceJain   float64 // Jain's index of x_b at the end
	PlaceMax    float64 // max x_b / mean x_b at the end
	Reconnect   float64 // seconds from the fault until the last of its gateways reconnected
	Balanced    float64 // Reconnect when PlaceMax ≤ placeBalanced at the end, else +Inf
	Overloaded  int     // reconnected gateways whose broker is offered more than its capacity at the end
}

// clock is the simulated clock the tables read.
type clock struct{ ns int64 }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *clock) now() time.Time { return epoch.Add(time.Duration(c.ns)) }

// NewStrategy returns a strategy by name: any of selector.Names(), or one
// of them followed by "+outlier" for it behind selector.WithOutlier with
// Envoy's defaults.
func NewStrategy(name string) (selector.Strategy, error) {
	if name == "drf/5s" {
		// The paper re-scores every 5 minutes, longer than a lab run: this
		// variant re-scores every 5 s so that its factors get a say.
		return selector.NewDRF(selector.DRFOptions{Period: 5 * time.Second}), nil
	}
	if inner, ok := strings.CutSuffix(name, "+outlier"); ok {
		s, err := selector.New(inner, selector.StrategyOptions{})
		if err != nil {
			return nil, err
		}
		return selector.WithOutlier(s, selector.OutlierOptions{}), nil
	}
	return selector.New(name, selector.StrategyOptions{})
}

// sim is one run in progress.
type sim struct {
	sc       *Scenario
	clk      clock
	q        eventQueue
	tables   []*selector.Table
	strats   []selector.Strategy
	rngs     []*rand.Rand // per gateway: arrivals and service draws only
	servers  []server
	reqs     []request
	rtt      [][]int64 // [gateway][server], round trip in ns
	lat      []int64   // measured latencies, ns; failures count as Timeout
	latJoin  []int64   // latencies of the requests that arrived in the 10 s after a join
	ok, ok1s int
	sent     []int   // measured requests sent to each server
	faultN   int     // requests picked within a fault window
	faultHit int     // of which to the faulty server
	perSec   []int   // requests by second of the run
	perSrv   [][]int // [second][server] requests sent
	maxRate  float64
	baseRate float64   // offered rate per gateway outside phases
	caps     []float64 // each server's capacity, requests per second
	events   int

	// Placement scenarios.
	conn      []int32     // per gateway: the server it is connected to, or -1
	pending   [][]pending // per gateway: messages waiting for a connection
	backoff   []*rand.Rand
	orphan    []bool // per gateway: it lost its connection to a fault
	lastConn  int64  // time of the latest reconnection of an orphan
	beforeMax float64
}

// pending is a message that waits for its gateway to connect.
type pending struct {
	t0 int64
	z  float64
}

// Simulate runs strategy (see [NewStrategy]) through scenario sc with seed.
// The arrivals, service times, round trips and report timings depend only
// on sc and seed, not on the strategy (common random numbers). The same
// arguments give the same Trial.
func Simulate(sc Scenario, strategy string, seed uint64) (Trial, error) {
	if err := sc.validate(); err != nil {
		return Trial{}, err
	}
	s := &sim{sc: &sc}
	ng, ns := sc.Gateways, len(sc.Servers)
	topo := rand.New(rand.NewPCG(seed, 0x70b0))
	s.rtt = sc.RTT(topo, ng, ns)
	s.servers = make([]server, ns)
	s.sent = make([]int, ns)
	secs := int(sc.Duration/time.Second) + 1
	s.perSec = make([]int, secs)
	s.perSrv = make([][]int, secs)
	for k := range s.perSrv {
		s.perSrv[k] = make([]int, ns)
	}
	for i, sv := range sc.Servers {
		s.servers[i].joined = sv.JoinAt == 0
	}
	for range ng {
		st, err := NewStrategy(strategy)
		if err != nil {
			return Trial{}, err
		}
		t := selector.NewTable(selector.Options{Now: s.clk.now, Seed: seed*1_000_003 + uint64(len(s.tables)) + 1})
		for i, sv := range sc.Servers {
			if sv.JoinAt == 0 {
				if _, err := t.Add(fmt.Sprintf("s%d", i), sv.Workers); err != nil {
					return Trial{}, fmt.Errorf("lab: scenario %s: %w", sc.Name, err)
				}
			}
		}
		s.tables = append(s.tables, t)
		s.strats = append(s.strats, st)
		s.rngs = append(s.rngs, rand.New(rand.NewPCG(seed, uint64(len(s.rngs))+1)))
	}
	for i, sv := range sc.Servers {
		if sv.JoinAt > 0 {
			s.q.push(event{at: int64(sv.JoinAt), kind: evJoin, a: int32(i)})
		}
	}
	if sc.Placement != nil {
		s.conn = make([]int32, ng)
		s.pending = make([][]pending, ng)
		s.orphan = make([]bool, ng)
		for g := range ng {
			s.conn[g] = -1
			// Backoff draws: a stream per gateway, apart from the arrivals.
			s.backoff = append(s.backoff, rand.New(rand.NewPCG(seed, 0xbac0ff<<20|uint64(g))))
		}
		s.beforeMax = math.NaN()
	}
	for _, sv := range sc.Servers {
		s.caps = append(s.caps, sv.capacity())
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
	end := int64(sc.Duration + sc.Timeout + time.Second)
	for s.q.len() > 0 {
		e := s.q.pop()
		if e.at > end {
			break
		}
		s.clk.ns = e.at
		s.events++
		s.handle(e)
	}
	return s.result(), nil
}

// nextGap is the gap to gateway g's next candidate arrival at its peak rate.
func (s *sim) nextGap(g int) int64 {
	return int64(s.rngs[g].ExpFloat64() / s.maxRate * 1e9)
}

func (s *sim) handle(e event) {
	sc := s.sc
	now := e.at
	switch e.kind {
	case evArrival:
		g := int(e.a)
		r := s.rngs[g]
		next := now + s.nextGap(g)
		if next < int64(sc.Duration) {
			s.q.push(event{at: next, kind: evArrival, a: e.a})
		}
		// Thinning: accept with probability rate(now)/peak rate.
		accept := r.Float64()*s.maxRate < s.rate(now)
		z := r.NormFloat64()
		if accept {
			s.arrive(g, now, z)
		}
	case evReach:
		s.reach(int(e.a), now)
	case evDone:
		s.done(int(e.a), now)
	case evResponse:
		rq := &s.reqs[e.a]
		if e.b == 1 {
			s.finish(rq, now, errRefused)
		} else {
			s.finish(rq, now, nil)
		}
	case evTimeout:
		s.finish(&s.reqs[e.a], now, errTimeout)
	case evProbe:
		g := int(e.a)
		t := s.tables[g]
		for i := range s.servers {
			if !s.servers[i].joined {
				continue
			}
			if s.servers[i].mode.answers() {
				t.Probe(i, time.Duration(s.rtt[g][i]), nil)
			} else {
				t.Probe(i, 0, errTimeout)
			}
		}
		s.q.push(event{at: now + int64(sc.ProbeInterval), kind: evProbe, a: e.a})
	case evRefresh:
		g := int(e.a)
		t := s.tables[g]
		for i := range s.servers {
			if !s.servers[i].joined {
				continue
			}
			if l, ok := s.report(i, now); ok {
				t.Report(i, l)
			}
		}
		s.q.push(event{at: now + int64(sc.RefreshInterval), kind: evRefresh, a: e.a})
	case evSample:
		for i := range s.servers {
			sv := &s.servers[i]
			sv.samples = append(sv.samples, sample{at: now, util: s.util(i), queued: len(sv.queue) - sv.head, bsy: sv.busy, conns: sv.conns})
		}
		s.q.push(event{at: now + int64(sampleEvery), kind: evSample})
	case evFault:
		s.fault(int(e.a), e.b == 1, now)
	case evReconnect:
		i := int(e.a)
		if s.servers[i].mode.Kind != FastFail {
			for _, t := range s.tables {
				t.SetUp(i, true)
			}
		}
	case evJoin:
		i := int(e.a)
		s.servers[i].joined = true
		for _, t := range s.tables {
			// validate allows at most MaxUpstreams servers, and none is
			// retired: the table cannot be full.
			if _, err := t.Add(fmt.Sprintf("s%d", i), sc.Servers[i].Workers); err != nil {
				panic(err)
			}
		}
	case evConnect:
		s.connect(int(e.a), now)
	}
}

// connect connects gateway g to the server its strategy picks, and sends
// what waited for the connection; with nothing up it tries again in a
// second.
func (s *sim) connect(g int, now int64) {
	i, ok := s.strats[g].Pick(s.tables[g], 0)
	if !ok {
		s.q.push(event{at: now + int64(time.Second), kind: evConnect, a: int32(g)})
		return
	}
	s.conn[g] = int32(i)
	s.servers[i].conns++
	if s.orphan[g] {
		s.lastConn = max(s.lastConn, now)
	}
	for _, m := range s.pending[g] {
		s.send(g, i, m.t0, m.z, now)
	}
	s.pending[g] = s.pending[g][:0]
}

// sampleEvery is how often servers record their state for aged reports.
const sampleEvery = 250 * time.Millisecond

// rate is the offered rate per gateway at now.
func (s *sim) rate(now int64) float64 {
	f := 1.0
	for _, p := range s.sc.Phases {
		if now >= int64(p.From) && now < int64(p.To) {
			f = p.Factor
		}
	}
	return s.baseRate * f
}

// util is server i's utilisation: busy workers over workers; in Placement
// scenarios, the message rate its connections offer over its capacity,
// capped at 1, as a broker's CPU averaged over a second would read.
func (s *sim) util(i int) float64 {
	if s.sc.Placement != nil {
		return min(float64(s.servers[i].conns)*s.rate(s.clk.ns)/s.caps[i], 1)
	}
	return float64(s.servers[i].busy) / float64(s.sc.Servers[i].Workers)
}

// report is server i's load report as gateway sees it at now: its state
// ReportAge ago. A server that does not answer sends none.
func (s *sim) report(i int, now int64) (selector.Load, bool) {
	sv := &s.servers[i]
	if !sv.mode.answers() {
		return selector.Load{}, false
	}
	spec := s.sc.Servers[i]
	var smp sample
	if age := int64(s.sc.ReportAge); age <= 0 {
		smp = sample{at: now, util: s.util(i), queued: len(sv.queue) - sv.head, bsy: sv.busy, conns: sv.conns}
	} else {
		k, found := slices.BinarySearchFunc(sv.samples, now-age, func(x sample, t int64) int {
			switch {
			case x.at < t:
				return -1
			case x.at > t:
				return 1
			}
			return 0
		})
		if !found {
			k--
		}
		if k < 0 || sv.samples[k].at < int64(spec.JoinAt) {
			return selector.Load{}, false
		}
		smp = sv.samples[k]
	}
	speed := float64(spec.Workers) * float64(baseService) / float64(spec.Service)
	conns := smp.queued + smp.bsy
	if s.sc.Placement != nil {
		conns = smp.conns // a broker reports its clients
	}
	return selector.Load{
		CPU: smp.util, Memory: smp.util, DiskIO: smp.util, Network: smp.util,
		Processes: smp.bsy, Connections: conns,
		CPUMHz: 1000 * speed, MemoryMB: 1024 * float64(spec.Workers), BandwidthMbps: 100 * speed,
		At: epoch.Add(time.Duration(smp.at)),
	}, true
}

func (s *sim) arrive(g int, now int64, z float64) {
	sc := s.sc
	if sc.Placement != nil {
		if c := s.conn[g]; c >= 0 {
			s.send(g, int(c), now, z, now)
		} else {
			s.pending[g] = append(s.pending[g], pending{t0: now, z: z})
		}
		return
	}
	i, ok := s.strats[g].Pick(s.tables[g], 0)
	if !ok {
		// Nothing up: the packet would wait in the buffer; the lab counts
		// it as failed.
		if now >= int64(sc.Warmup) {
			s.lat = append(s.lat, int64(sc.Timeout))
		}
		return
	}
	s.send(g, i, now, z, now)
}

// send sends gateway g's request that arrived at t0 to server i at now.
func (s *sim) send(g, i int, t0 int64, z float64, now int64) {
	sc := s.sc
	measured := t0 >= int64(sc.Warmup)
	if sec := int(now / int64(time.Second)); sec < len(s.perSec) {
		s.perSec[sec]++
		s.perSrv[sec][i]++
	}
	if measured {
		s.sent[i]++
		if s.inFault(now) {
			s.faultN++
			if i == sc.Faulty {
				s.faultHit++
			}
		}
	}
	id := int32(len(s.reqs))
	s.reqs = append(s.reqs, request{gw: int32(g), srv: int32(i), t0: t0, z: z, tk: s.tables[g].Begin(i), measured: measured})
	s.q.push(event{at: now + s.rtt[g][i]/2, kind: evReach, a: id})
	s.q.push(event{at: now + int64(sc.Timeout), kind: evTimeout, a: id})
}

// inFault reports whether now is within a fault window of the faulty server.
func (s *sim) inFault(now int64) bool {
	for _, f := range s.sc.Faults {
		if f.Server == s.sc.Faulty && now >= int64(f.From) && (f.To == 0 || now < int64(f.To)) {
			return true
		}
	}
	return false
}

func (s *sim) reach(id int, now int64) {
	rq := &s.reqs[id]
	i := int(rq.srv)
	sv := &s.servers[i]
	switch sv.mode.Kind {
	case FastFail:
		s.q.push(event{at: now + s.rtt[rq.gw][i]/2, kind: evResponse, a: int32(id), b: 1})
		return
	case BlackHole:
		return
	}
	if sv.busy < s.sc.Servers[i].Workers {
		s.serve(i, id, now)
		return
	}
	sv.queue = append(sv.queue, int32(id))
}

// serve starts serving request id on server i.
func (s *sim) serve(i, id int, now int64) {
	sv := &s.servers[i]
	spec := s.sc.Servers[i]
	rq := &s.reqs[id]
	d := float64(spec.Service) * math.Exp(spec.Sigma*rq.z) * s.slow(i, now)
	sv.busy++
	end := now + int64(d)
	// Busy time within the measured window, for utilisation.
	from, to := max(now, int64(s.sc.Warmup)), min(end, int64(s.sc.Duration))
	if to > from {
		sv.busyNs += to - from
	}
	s.q.push(event{at: end, kind: evDone, a: int32(id)})
}

// slow is server i's service-time multiplier at now.
func (s *sim) slow(i int, now int64) float64 {
	m := s.servers[i].mode
	switch m.Kind {
	case Slow:
		return m.Factor
	case SlowDeath:
		// Ramps from 1 to Factor over the fault's ramp.
		p := float64(now-int64(m.From)) / float64(m.Ramp)
		return 1 + (m.Factor-1)*min(max(p, 0), 1)
	}
	return 1
}

func (s *sim) done(id int, now int64) {
	rq := &s.reqs[id]
	i := int(rq.srv)
	sv := &s.servers[i]
	sv.busy--
	switch sv.mode.Kind {
	case BlackHole:
		// Never answers.
	case FastFail:
		// Killed with the connection; already answered with an error.
	default:
		s.q.push(event{at: now + s.rtt[rq.gw][i]/2, kind: evResponse, a: int32(id)})
	}
	s.next(i, now)
}

// next starts the next queued request on server i if a worker is free.
func (s *sim) next(i int, now int64) {
	sv := &s.servers[i]
	for sv.busy < s.sc.Servers[i].Workers && sv.head < len(sv.queue) {
		id := int(sv.queue[sv.head])
		sv.head++
		if s.reqs[id].finished {
			continue // the gateway gave up: the server drops it (it would cancel)
		}
		s.serve(i, id, now)
	}
	if sv.head > 1024 && sv.head*2 > len(sv.queue) {
		sv.queue = append(sv.queue[:0], sv.queue[sv.head:]...)
		sv.head = 0
	}
}

func (s *sim) finish(rq *request, now int64, err error) {
	if rq.finished {
		return
	}
	rq.finished = true
	s.tables[rq.gw].End(rq.tk, err)
	if !rq.measured {
		return
	}
	l := now - rq.t0
	if err != nil {
		l = max(int64(s.sc.Timeout), l)
	} else {
		s.ok++
		if l <= int64(time.Second) {
			s.ok1s++
		}
	}
	s.lat = append(s.lat, l)
	if f := s.sc.Faulty; f >= 0 {
		if j := int64(s.sc.Servers[f].JoinAt); j > 0 && rq.t0 >= j && rq.t0 < j+int64(joinWindow) {
			s.latJoin = append(s.latJoin, l)
		}
	}
}

// joinWindow is how long after a join JoinP99 measures.
const joinWindow = 10 * time.Second

// fault applies the start (or, when ending, the end) of fault k.
func (s *sim) fault(k int, ending bool, now int64) {
	f := s.sc.Faults[k]
	i := f.Server
	sv := &s.servers[i]
	if ending {
		was := sv.mode.Kind
		sv.mode = Fault{}
		if was == FastFail || was == BlackHole || was == SlowDeath {
			// Reconnects a second later (FastFail), or was never seen down.
			s.q.push(event{at: now + int64(time.Second), kind: evReconnect, a: int32(i)})
		}
		s.next(i, now)
		return
	}
	if s.sc.Placement != nil && math.IsNaN(s.beforeMax) {
		s.beforeMax, _, _ = s.placement()
	}
	sv.mode = f
	if f.Kind == FastFail && s.sc.Placement != nil {
		// Its connections drop; each gateway reconnects after its backoff.
		for g, c := range s.conn {
			if int(c) != i {
				continue
			}
			s.conn[g], s.orphan[g] = -1, true
			sv.conns--
			d := s.rtt[g][i] / 2
			if b := s.sc.Placement.Backoff; b > 0 {
				d += int64(s.backoff[g].Float64() * float64(b))
			}
			s.q.push(event{at: now + d, kind: evConnect, a: int32(g)})
		}
	}
	if f.Kind == FastFail {
		// The connection drops: what it held fails, gateways see it down.
		sv.queue, sv.head = sv.queue[:0], 0
		for id := range s.reqs {
			rq := &s.reqs[id]
			if int(rq.srv) == i && !rq.finished && rq.t0 >= now-int64(s.sc.Timeout) {
				s.q.push(event{at: now + s.rtt[rq.gw][i]/2, kind: evResponse, a: int32(id), b: 1})
			}
		}
		for _, t := range s.tables {
			t.SetUp(i, false)
		}
	}
}

func (s *sim) result() Trial {
	sc := s.sc
	r := Trial{Requests: len(s.lat), Events: s.events, FaultyShare: math.NaN()}
	if len(s.lat) == 0 {
		return r
	}
	slices.Sort(s.lat)
	var sum float64
	for _, l := range s.lat {
		sum += float64(l)
	}
	n := len(s.lat)
	r.Mean = sum / float64(n) / 1e9
	r.P50 = quantile(s.lat, 0.5)
	r.P99 = quantile(s.lat, 0.99)
	r.P999 = quantile(s.lat, 0.999)
	r.Success = float64(s.ok) / float64(n)
	r.Success1s = float64(s.ok1s) / float64(n)
	if sc.Faulty >= 0 && s.faultN > 0 {
		r.FaultyShare = float64(s.faultHit) / float64(s.faultN)
	}
	// Jain over utilisation / capacity share: busy worker-time per worker.
	window := float64(sc.Duration - sc.Warmup)
	var sx, sxx float64
	for i, sv := range s.servers {
		u := float64(sv.busyNs) / window / float64(sc.Servers[i].Workers)
		sx += u
		sxx += u * u
	}
	if sxx > 0 {
		r.Jain = sx * sx / (float64(len(s.servers)) * sxx)
	}
	r.Osc, r.SettleFault, r.SettleRecovery = math.NaN(), math.NaN(), math.NaN()
	r.JoinSettle, r.JoinRamp, r.JoinPeak, r.JoinP99 = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	r.PlaceBefore, r.PlaceJain, r.PlaceMax, r.Reconnect, r.Balanced = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if sc.Placement != nil {
		s.placementResult(&r)
		return r
	}
	r.Osc = s.oscillation()
	if sc.Faulty >= 0 {
		r.Share = s.share(sc.Faulty)
		if sc.Servers[sc.Faulty].JoinAt > 0 {
			s.joinResult(&r)
		} else {
			r.SettleFault, r.SettleRecovery = s.faultSettle(r.Share)
		}
	}
	return r
}

// share is server i's share of each second's requests, by second of the run.
func (s *sim) share(i int) []float64 {
	out := make([]float64, len(s.perSec)-1)
	for k := range out {
		if s.perSec[k] > 0 {
			out[k] = float64(s.perSrv[k][i]) / float64(s.perSec[k])
		}
	}
	return out
}

// Convergence: a share has settled at the first 1 s bin from which it stays
// within settleBand of its target for settleFor.
const (
	settleBand = 0.03
	settleFor  = 5 // seconds (bins)
)

// settle returns how long after bin from the share first stays within
// settleBand of target for settleFor bins, all before bin to, in seconds;
// +Inf when it never does.
func settle(share []float64, from, to int, target float64) float64 {
	to = min(to, len(share))
	run := 0
	for k := from; k < to; k++ {
		if math.Abs(share[k]-target) <= settleBand {
			run++
			if run == settleFor {
				return float64(k + 1 - settleFor - from)
			}
		} else {
			run = 0
		}
	}
	return math.Inf(1)
}

// outage is a stretch of faults of the faulty server, back to back; to is
// 0 when it lasts to the end of the run.
type outage struct{ from, to time.Duration }

// outages merges the faulty server's faults that follow each other.
func (sc *Scenario) outages() []outage {
	var out []outage
	for _, f := range sc.Faults {
		if f.Server != sc.Faulty {
			continue
		}
		if n := len(out); n > 0 && out[n-1].to == f.From {
			out[n-1].to = f.To
			continue
		}
		out = append(out, outage{f.From, f.To})
	}
	return out
}

// faultSettle returns the mean settle times after the faulty server's
// outages start, towards a share of 0, and after they end, towards its
// share over the 10 s before the first outage (from 2 s into the run).
func (s *sim) faultSettle(share []float64) (fault, recovery float64) {
	os := s.sc.outages()
	if len(os) == 0 {
		return math.NaN(), math.NaN()
	}
	sec := func(d time.Duration) int { return int(d / time.Second) }
	end := len(share)
	first := sec(os[0].from)
	var base float64
	if lo := max(first-10, 2); lo < first {
		for _, x := range share[lo:first] {
			base += x
		}
		base /= float64(first - lo)
	}
	var nf, nr int
	for k, o := range os {
		to := end
		if o.to > 0 {
			to = sec(o.to)
		}
		fault += settle(share, sec(o.from), to, 0)
		nf++
		if o.to > 0 {
			next := end
			if k+1 < len(os) {
				next = sec(os[k+1].from)
			}
			recovery += settle(share, to, next, base)
			nr++
		}
	}
	fault /= float64(nf)
	if nr == 0 {
		return fault, math.NaN()
	}
	return fault, recovery / float64(nr)
}

// oscillation is the mean |share(t) − share(t−1)| over the measured
// window's 1 s bins and over the servers other than the faulty one.
func (s *sim) oscillation() float64 {
	from, to := int(s.sc.Warmup/time.Second), len(s.perSec)-1
	var sum float64
	n := 0
	for i := range s.servers {
		if i == s.sc.Faulty {
			continue
		}
		for k := from + 1; k < to; k++ {
			if s.perSec[k] == 0 || s.perSec[k-1] == 0 {
				continue
			}
			a := float64(s.perSrv[k][i]) / float64(s.perSec[k])
			b := float64(s.perSrv[k-1][i]) / float64(s.perSec[k-1])
			sum += math.Abs(a - b)
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// joinPeakFor is the window after a join over which JoinPeak looks.
const joinPeakFor = 5 // seconds (bins)

func (s *sim) joinResult(r *Trial) {
	sc := s.sc
	f := sc.Faulty
	var all float64
	for _, sv := range sc.Servers {
		all += float64(sv.Workers)
	}
	capShare := float64(sc.Servers[f].Workers) / all
	j, end := int(sc.Servers[f].JoinAt/time.Second), len(r.Share)
	r.JoinRamp = math.Inf(1)
	for k := j; k < end; k++ {
		if r.Share[k] >= capShare/2 {
			r.JoinRamp = float64(k - j)
			break
		}
	}
	var peak float64
	for k := j; k < min(j+joinPeakFor, end); k++ {
		peak = max(peak, r.Share[k])
	}
	r.JoinPeak = peak / capShare
	var steady float64
	lo := max(end-20, j)
	for _, x := range r.Share[lo:end] {
		steady += x
	}
	steady /= float64(max(end-lo, 1))
	r.JoinSettle = settle(r.Share, j, end, steady)
	if len(s.latJoin) > 0 {
		slices.Sort(s.latJoin)
		r.JoinP99 = quantile(s.latJoin, 0.99)
	}
}

// placeBalanced is the largest max-over-mean of connections per unit of
// capacity at which a placement counts as balanced.
const placeBalanced = 1.25

// placement returns the balance of connections over the brokers that are
// up: max over mean and Jain's index of x_b = connections_b / capacity
// share_b, and which brokers are offered more than their capacity.
func (s *sim) placement() (maxMean, jain float64, over []bool) {
	over = make([]bool, len(s.servers))
	var capUp float64
	for i, sv := range s.servers {
		if sv.joined && sv.mode.Kind != FastFail {
			capUp += s.caps[i]
		}
	}
	var sx, sxx, mx float64
	n := 0
	for i, sv := range s.servers {
		if !sv.joined || sv.mode.Kind == FastFail {
			continue
		}
		c := s.caps[i]
		x := float64(sv.conns) / (c / capUp)
		sx, sxx, mx = sx+x, sxx+x*x, max(mx, x)
		n++
		over[i] = float64(sv.conns)*s.rate(s.clk.ns) > c
	}
	if n == 0 || sx == 0 {
		return math.NaN(), math.NaN(), over
	}
	return mx / (sx / float64(n)), sx * sx / (float64(n) * sxx), over
}

func (s *sim) placementResult(r *Trial) {
	r.PlaceBefore = s.beforeMax
	var over []bool
	r.PlaceMax, r.PlaceJain, over = s.placement()
	for g, c := range s.conn {
		if s.orphan[g] && c >= 0 && over[c] {
			r.Overloaded++
		}
	}
	for _, f := range s.sc.Faults {
		if f.Kind != FastFail {
			continue
		}
		r.Reconnect = max(float64(s.lastConn-int64(f.From)), 0) / 1e9
		for g, c := range s.conn {
			if s.orphan[g] && c < 0 {
				r.Reconnect = math.Inf(1) // still waiting
			}
		}
		r.Balanced = r.Reconnect
		if !(r.PlaceMax <= placeBalanced) {
			r.Balanced = math.Inf(1)
		}
		break
	}
}

// quantile is the q-quantile of sorted ns values, in seconds (nearest rank).
func quantile(sorted []int64, q float64) float64 {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	k = min(max(k, 0), len(sorted)-1)
	return float64(sorted[k]) / 1e9
}
