package lab

import (
	"fmt"
	"math"
	"slices"
	"time"

	"fieldlink/selector"
)

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
