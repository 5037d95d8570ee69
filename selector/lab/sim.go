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
}

type sample struct {
	at          int64
	util        float64
	queued, bsy int
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
	ok, ok1s int
	sent     []int // measured requests sent to each server
	faultN   int   // requests picked within a fault window
	faultHit int   // of which to the faulty server
	perSec   [][2]int
	maxRate  float64
	events   int
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
	s.perSec = make([][2]int, int(sc.Duration/time.Second)+1)
	for range ng {
		st, err := NewStrategy(strategy)
		if err != nil {
			return Trial{}, err
		}
		t := selector.NewTable(selector.Options{Now: s.clk.now, Seed: seed*1_000_003 + uint64(len(s.tables)) + 1})
		for i, sv := range sc.Servers {
			t.Add(fmt.Sprintf("s%d", i), sv.Workers)
		}
		s.tables = append(s.tables, t)
		s.strats = append(s.strats, st)
		s.rngs = append(s.rngs, rand.New(rand.NewPCG(seed, uint64(len(s.rngs))+1)))
	}
	// Offered rate per gateway at its peak, for thinning.
	s.maxRate = sc.Load * sc.capacity() / float64(ng)
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
			if l, ok := s.report(i, now); ok {
				t.Report(i, l)
			}
		}
		s.q.push(event{at: now + int64(sc.RefreshInterval), kind: evRefresh, a: e.a})
	case evSample:
		for i := range s.servers {
			sv := &s.servers[i]
			sv.samples = append(sv.samples, sample{at: now, util: s.util(i), queued: len(sv.queue) - sv.head, bsy: sv.busy})
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
	}
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
	return s.sc.Load * s.sc.capacity() / float64(s.sc.Gateways) * f
}

func (s *sim) util(i int) float64 {
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
	smp := sample{at: now, util: s.util(i), queued: len(sv.queue) - sv.head, bsy: sv.busy}
	if age := int64(s.sc.ReportAge); age > 0 {
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
		if k < 0 {
			return selector.Load{}, false
		}
		smp = sv.samples[k]
	}
	speed := float64(spec.Workers) * float64(baseService) / float64(spec.Service)
	return selector.Load{
		CPU: smp.util, Memory: smp.util, DiskIO: smp.util, Network: smp.util,
		Processes: smp.bsy, Connections: smp.queued + smp.bsy,
		CPUMHz: 1000 * speed, MemoryMB: 1024 * float64(spec.Workers), BandwidthMbps: 100 * speed,
		At: epoch.Add(time.Duration(smp.at)),
	}, true
}

func (s *sim) arrive(g int, now int64, z float64) {
	sc := s.sc
	measured := now >= int64(sc.Warmup)
	if sec := int(now / int64(time.Second)); sec < len(s.perSec) {
		s.perSec[sec][0]++
	}
	i, ok := s.strats[g].Pick(s.tables[g], 0)
	if !ok {
		// Nothing up: the packet would wait in the buffer; the lab counts
		// it as failed.
		if measured {
			s.lat = append(s.lat, int64(sc.Timeout))
		}
		return
	}
	if sec := int(now / int64(time.Second)); sec < len(s.perSec) && i == sc.Faulty {
		s.perSec[sec][1]++
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
	s.reqs = append(s.reqs, request{gw: int32(g), srv: int32(i), t0: now, z: z, tk: s.tables[g].Begin(i), measured: measured})
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
		l = int64(s.sc.Timeout)
	} else {
		s.ok++
		if l <= int64(time.Second) {
			s.ok1s++
		}
	}
	s.lat = append(s.lat, l)
}

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
	sv.mode = f
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
	if sc.Faulty >= 0 {
		r.Share = make([]float64, len(s.perSec)-1)
		for k := range r.Share {
			if s.perSec[k][0] > 0 {
				r.Share[k] = float64(s.perSec[k][1]) / float64(s.perSec[k][0])
			}
		}
	}
	return r
}

// quantile is the q-quantile of sorted ns values, in seconds (nearest rank).
func quantile(sorted []int64, q float64) float64 {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	k = min(max(k, 0), len(sorted)-1)
	return float64(sorted[k]) / 1e9
}
