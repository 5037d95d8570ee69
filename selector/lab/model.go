package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
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

// rejectedError is an error answer from a server that is up (an HTTP 503,
// a broker that drops the publish): a sinkhole's answer.
type rejectedError struct{}

func (rejectedError) Error() string { return "lab: delivery rejected" }

var (
	errTimeout  = timeoutError{}
	errRefused  = refusedError{}
	errRejected = rejectedError{}
)

// packet is one packet a gateway delivers, over one or more attempts.
type packet struct {
	gw       int32
	tries    int32   // attempts in the current round (since it was last taken from the buffer)
	attempts int32   // attempts in all
	t0       int64   // when it should have been sent (its arrival)
	z        float64 // standard normal draw of its service time, the same on every attempt
	skip     uint64  // servers that failed it in the current round
	done     bool    // acknowledged, or given up at its deadline
	end      int64   // when it was acknowledged or given up
	measured bool
}

// request is one attempt to deliver a packet to a server.
type request struct {
	pkt      int32
	srv      int32
	sent     int64
	tk       selector.Ticket
	finished bool
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
		switch e.b {
		case respRefused:
			s.finish(rq, now, errRefused)
		case respRejected:
			s.finish(rq, now, errRejected)
		default:
			s.finish(rq, now, nil)
		}
	case evTimeout:
		s.finish(&s.reqs[e.a], now, errTimeout)
	case evWake:
		s.wake(int(e.a), now)
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
	case evReconnectOne:
		g, i := int(e.a>>8), int(e.a&0xff)
		if s.servers[i].mode.Kind != FastFail {
			s.tables[g].SetUp(i, true)
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
	waiting := s.pending[g]
	s.pending[g] = nil
	for _, id := range waiting {
		s.dispatch(int(id), now)
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
	idle := sv.mode.Kind == Sinkhole // serves nothing, so reports nothing in use
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
	if idle {
		smp.util, smp.bsy, conns = 0, 0, 0
	}
	return selector.Load{
		CPU: smp.util, Memory: smp.util, DiskIO: smp.util, Network: smp.util,
		Processes: smp.bsy, Connections: conns,
		CPUMHz: 1000 * speed, MemoryMB: 1024 * float64(spec.Workers), BandwidthMbps: 100 * speed,
		At: epoch.Add(time.Duration(smp.at)),
	}, true
}

func (s *sim) arrive(g int, now int64, z float64) {
	id := int32(len(s.pkts))
	s.pkts = append(s.pkts, packet{gw: int32(g), t0: now, z: z, measured: now >= int64(s.sc.Warmup)})
	if s.waking[g] {
		// The gateway's delivery loop is backing off: the packet waits in
		// the buffer with the others.
		s.buffered[g] = append(s.buffered[g], id)
		return
	}
	s.dispatch(int(id), now)
}

// dispatch takes packet id from the buffer and sends it: over the
// gateway's connection in Placement scenarios (waiting for it when there
// is none), else to the server its strategy picks, skipping the servers
// resting after failures, as uplink.Delivery does. When no server can
// take it, it goes back to the buffer and the gateway's loop backs off
// (or, with a single attempt, it fails).
func (s *sim) dispatch(id int, now int64) {
	p := &s.pkts[id]
	g := int(p.gw)
	if now-p.t0 >= int64(s.sc.Deadline) {
		s.settle(p, now, false)
		return
	}
	p.tries, p.skip = 0, 0
	if s.sc.Placement != nil && s.conn[g] < 0 {
		s.pending[g] = append(s.pending[g], int32(id))
		return
	}
	i, ok := s.pick(g, 0, now)
	if !ok {
		if s.single {
			// Nothing up, one attempt: the packet counts as failed at the
			// timeout.
			s.settle(p, p.t0+int64(s.sc.Timeout), false)
			return
		}
		s.buffered[g] = append(s.buffered[g], int32(id))
		s.backOff(g, now)
		return
	}
	s.gwBackoff[g] = int64(firstBackoff)
	s.send(id, i, now)
}

// pick is the server gateway g sends to, skipping skip and the servers
// resting after failures: its connection in Placement scenarios, else its
// strategy's pick.
func (s *sim) pick(g int, skip uint64, now int64) (int, bool) {
	if s.sc.Placement != nil {
		c := int(s.conn[g])
		if c < 0 || skip&(1<<c) != 0 || s.cool[g][c] > now {
			return 0, false
		}
		return c, true
	}
	for {
		i, ok := s.strats[g].Pick(s.tables[g], skip)
		if !ok {
			return 0, false
		}
		if s.cool[g][i] <= now {
			return i, true
		}
		skip |= 1 << i
	}
}

// backOff schedules gateway g's delivery loop to look at its buffer again
// after its backoff (from firstBackoff, doubling with jitter up to
// maxBackoff, as uplink.Delivery's), unless it already waits.
func (s *sim) backOff(g int, now int64) {
	if s.waking[g] {
		return
	}
	s.waking[g] = true
	b := s.gwBackoff[g]
	s.q.push(event{at: now + s.jitter(g, b), kind: evWake, a: int32(g)})
	s.gwBackoff[g] = min(2*b, int64(maxBackoff))
}

// wake is gateway g's loop looking at its buffer after a backoff: it sends
// the waiting packets, oldest first, until one finds no server.
func (s *sim) wake(g int, now int64) {
	s.waking[g] = false
	waiting := s.buffered[g]
	s.buffered[g] = nil
	for k, id := range waiting {
		if s.waking[g] {
			// A packet found no server: the rest wait for the next wake.
			s.buffered[g] = append(s.buffered[g], waiting[k:]...)
			return
		}
		s.dispatch(int(id), now)
	}
}

// jitter is uplink's jitter: uniform in [d/2, d].
func (s *sim) jitter(g int, d int64) int64 {
	return d/2 + int64(s.jit[g].Float64()*float64(d/2))
}

// rest records a failure of server i on gateway g and rests it, as
// uplink.Delivery rests an upstream: not picked for 100 ms after its first
// failure in a row, doubling up to maxBackoff, jittered.
func (s *sim) rest(g, i int, now int64) {
	s.failRun[g][i]++
	wait := min(int64(firstBackoff)<<min(s.failRun[g][i]-1, 16), int64(maxBackoff))
	s.cool[g][i] = max(s.cool[g][i], now+s.jitter(g, wait))
}

// The delivery loop's backoffs, as uplink.Delivery's defaults.
const (
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
)

// send sends an attempt of packet id to server i at now.
func (s *sim) send(id, i int, now int64) {
	sc := s.sc
	p := &s.pkts[id]
	g := int(p.gw)
	p.tries++
	p.attempts++
	if sec := int(now / int64(time.Second)); sec < len(s.perSec) {
		s.perSec[sec]++
		s.perSrv[sec][i]++
	}
	if p.measured {
		s.sent[i]++
		if s.inFault(now) {
			s.faultN++
			if i == sc.Faulty {
				s.faultHit++
			}
		}
	}
	rid := int32(len(s.reqs))
	s.reqs = append(s.reqs, request{pkt: int32(id), srv: int32(i), sent: now, tk: s.tables[g].Begin(i)})
	s.q.push(event{at: now + s.rtt[g][i]/2, kind: evReach, a: rid})
	s.q.push(event{at: now + int64(sc.Timeout), kind: evTimeout, a: rid})
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

// Answers an attempt can get (event b of evResponse).
const (
	respOK = iota
	respRefused
	respRejected
)

func (s *sim) reach(id int, now int64) {
	rq := &s.reqs[id]
	i := int(rq.srv)
	g := s.pkts[rq.pkt].gw
	sv := &s.servers[i]
	switch sv.mode.Kind {
	case FastFail:
		s.q.push(event{at: now + s.rtt[g][i]/2, kind: evResponse, a: int32(id), b: respRefused})
		return
	case Sinkhole:
		s.q.push(event{at: now + s.rtt[g][i]/2, kind: evResponse, a: int32(id), b: respRejected})
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
	d := float64(spec.Service) * math.Exp(spec.Sigma*s.pkts[rq.pkt].z) * s.slow(i, now)
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
		s.q.push(event{at: now + s.rtt[s.pkts[rq.pkt].gw][i]/2, kind: evResponse, a: int32(id), b: respOK})
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

// finish ends attempt rq with err at now: the packet is acknowledged, or
// tried on another server (skipping those that failed it), or, when no
// server can take it or it has had its attempts, back in the buffer.
func (s *sim) finish(rq *request, now int64, err error) {
	if rq.finished {
		return
	}
	rq.finished = true
	p := &s.pkts[rq.pkt]
	g, i := int(p.gw), int(rq.srv)
	s.tables[g].End(rq.tk, err)
	if p.attempts == 1 && p.measured {
		s.first++
		if err == nil {
			s.firstOK++
		}
	}
	if err == nil {
		s.failRun[g][i] = 0
		s.settle(p, now, true)
		return
	}
	if s.single {
		s.settle(p, max(now, p.t0+int64(s.sc.Timeout)), false)
		return
	}
	s.rest(g, i, now)
	p.skip |= 1 << i
	if now-p.t0 >= int64(s.sc.Deadline) {
		s.settle(p, now, false)
		return
	}
	if int(p.tries) < s.tables[g].Len() {
		if j, ok := s.pick(g, p.skip, now); ok {
			s.send(int(rq.pkt), j, now)
			return
		}
	}
	// Back to the buffer: the loop takes it again at once, or backs off
	// when no server can take it.
	if s.waking[g] {
		s.buffered[g] = append(s.buffered[g], rq.pkt)
		return
	}
	s.dispatch(int(rq.pkt), now)
}

// settle records packet p's outcome at now: acknowledged (ok) or given up.
// Its latency runs from its arrival to its acknowledgement, retries
// included; a packet not acknowledged within the deadline counts as the
// deadline.
func (s *sim) settle(p *packet, now int64, ok bool) {
	if p.done {
		return
	}
	p.done, p.end = true, now
	if !p.measured {
		return
	}
	sc := s.sc
	l := now - p.t0
	if dl := int64(sc.Deadline); !ok || l > dl {
		ok, l = false, dl
		if s.single {
			l = max(now-p.t0, int64(sc.Timeout))
		}
	}
	if ok {
		s.ok++
		if l <= int64(10*time.Second) {
			s.ok10s++
		}
		if l <= int64(time.Second) {
			s.ok1s++
		}
	}
	if p.attempts > 1 {
		s.retried++
	}
	s.lat = append(s.lat, l)
	if f := sc.Faulty; f >= 0 {
		if j := int64(sc.Servers[f].JoinAt); j > 0 && p.t0 >= j && p.t0 < j+int64(joinWindow) {
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
		switch spread := s.sc.ReconnectSpread; {
		case was == FastFail && spread > 0:
			// Each gateway reconnects after its own backoff.
			r := rand.New(rand.NewPCG(s.seed, 0x5e7<<20|uint64(k)))
			for g := range s.tables {
				d := int64(time.Second) + int64(r.Float64()*float64(spread))
				s.q.push(event{at: now + d, kind: evReconnectOne, a: int32(g<<8 | i)})
			}
		case was == FastFail || was == BlackHole || was == SlowDeath:
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
			if int(rq.srv) == i && !rq.finished && rq.sent >= now-int64(s.sc.Timeout) {
				s.q.push(event{at: now + s.rtt[s.pkts[rq.pkt].gw][i]/2, kind: evResponse, a: int32(id), b: respRefused})
			}
		}
		for _, t := range s.tables {
			t.SetUp(i, false)
		}
	}
}
