package lab

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"fieldlink/selector"
)

// upstream is an upstream's run-time state.
type upstream struct {
	busy    int
	queue   []int32 // waiting requests, FIFO
	head    int
	busyNs  int64 // worker-ns of service within the measured window
	mode    Fault // current fault mode; FaultNone when healthy
	samples []sample
	joined  bool  // in the gateways' tables (JoinAt passed)
	conns   int   // gateways connected to it (Placement scenarios)
	turn    int64 // the next request's turn under its Budget
}

type sample struct {
	at                 int64
	util               float64
	queued, bsy, conns int
}

// sampleEvery is how often upstreams record their state for aged reports.
const sampleEvery = 250 * time.Millisecond

// util is upstream i's utilisation: busy workers over workers; in Placement
// scenarios, the message rate its connections offer over its capacity,
// capped at 1, as a broker's CPU averaged over a second would read.
func (s *sim) util(i int) float64 {
	if s.sc.Placement != nil {
		return min(float64(s.upstreams[i].conns)*s.rate(s.clk.ns)/s.caps[i], 1)
	}
	return float64(s.upstreams[i].busy) / float64(s.sc.Upstreams[i].Workers)
}

// report is upstream i's load report as gateway sees it at now: its state
// ReportAge ago. An upstream that does not answer sends none.
func (s *sim) report(i int, now int64) (selector.Load, bool) {
	up := &s.upstreams[i]
	if !up.mode.answers() {
		return selector.Load{}, false
	}
	spec := s.sc.Upstreams[i]
	idle := up.mode.Kind == Sinkhole // serves nothing, so reports nothing in use
	var smp sample
	if age := int64(s.sc.ReportAge); age <= 0 {
		smp = sample{at: now, util: s.util(i), queued: len(up.queue) - up.head, bsy: up.busy, conns: up.conns}
	} else {
		k, found := slices.BinarySearchFunc(up.samples, now-age, func(x sample, t int64) int {
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
		if k < 0 || up.samples[k].at < int64(spec.JoinAt) {
			return selector.Load{}, false
		}
		smp = up.samples[k]
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

// inFault reports whether now is within a fault window of the faulty upstream.
func (s *sim) inFault(now int64) bool {
	for _, f := range s.sc.Faults {
		if f.Upstream == s.sc.Faulty && now >= int64(f.From) && (f.To == 0 || now < int64(f.To)) {
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

// wait holds request id, reaching its upstream at now, until its turn under
// the upstream's Budget, and reports whether it must wait (an evTurn then
// brings it in).
func (s *sim) wait(id int, now int64) bool {
	rq := &s.reqs[id]
	i := int(rq.up)
	b := s.sc.Upstreams[i].Budget
	if up := &s.upstreams[i]; b > 0 && up.mode.answers() && up.mode.Kind != Sinkhole {
		at := max(now, up.turn)
		up.turn = at + int64(1e9/b)
		if at > now {
			s.q.push(event{at: at, kind: evTurn, a: int32(id)})
			return true
		}
	}
	return false
}

func (s *sim) reach(id int, now int64) {
	rq := &s.reqs[id]
	i := int(rq.up)
	g := s.pkts[rq.pkt].gw
	up := &s.upstreams[i]
	switch up.mode.Kind {
	case FastFail:
		s.q.push(event{at: now + s.rtt[g][i]/2, kind: evResponse, a: int32(id), b: respRefused})
		return
	case Sinkhole:
		s.q.push(event{at: now + s.rtt[g][i]/2, kind: evResponse, a: int32(id), b: respRejected})
		return
	case BlackHole:
		return
	}
	if up.busy < s.sc.Upstreams[i].Workers {
		s.serve(i, id, now)
		return
	}
	up.queue = append(up.queue, int32(id))
}

// serve starts serving request id on upstream i.
func (s *sim) serve(i, id int, now int64) {
	up := &s.upstreams[i]
	spec := s.sc.Upstreams[i]
	rq := &s.reqs[id]
	d := float64(spec.Service) * math.Exp(spec.Sigma*s.pkts[rq.pkt].z) * s.slow(i, now)
	up.busy++
	end := now + int64(d)
	// Busy time within the measured window, for utilisation.
	from, to := max(now, int64(s.sc.Warmup)), min(end, int64(s.sc.Duration))
	if to > from {
		up.busyNs += to - from
	}
	s.q.push(event{at: end, kind: evDone, a: int32(id)})
}

// slow is upstream i's service-time multiplier at now.
func (s *sim) slow(i int, now int64) float64 {
	m := s.upstreams[i].mode
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
	i := int(rq.up)
	up := &s.upstreams[i]
	up.busy--
	switch up.mode.Kind {
	case BlackHole:
		// Never answers.
	case FastFail:
		// Killed with the connection; already answered with an error.
	default:
		s.q.push(event{at: now + s.rtt[s.pkts[rq.pkt].gw][i]/2 + s.extra(i), kind: evResponse, a: int32(id), b: respOK})
	}
	s.next(i, now)
}

// extra is what upstream i adds to an answer after its service without
// holding a worker: a follower's forward hop, a slow upstream's delay.
func (s *sim) extra(i int) int64 {
	d := int64(s.sc.Upstreams[i].Forward)
	if m := s.upstreams[i].mode; m.Kind == Slow {
		d += int64(m.Delay)
	}
	return d
}

// probeRTT is what gateway g's probe of upstream i, which answers, times at
// now: the round trip, or with PublishProbe a publish's answer (the round
// trip, the median service as the upstream's speed is then, and extra).
func (s *sim) probeRTT(g, i int, now int64) time.Duration {
	d := s.rtt[g][i]
	if s.sc.PublishProbe {
		d += int64(float64(s.sc.Upstreams[i].Service)*s.slow(i, now)) + s.extra(i)
	}
	return time.Duration(d)
}

// next starts the next queued request on upstream i if a worker is free.
func (s *sim) next(i int, now int64) {
	up := &s.upstreams[i]
	for up.busy < s.sc.Upstreams[i].Workers && up.head < len(up.queue) {
		id := int(up.queue[up.head])
		up.head++
		if s.reqs[id].finished {
			continue // the gateway gave up: the upstream drops it (it would cancel)
		}
		s.serve(i, id, now)
	}
	if up.head > 1024 && up.head*2 > len(up.queue) {
		up.queue = append(up.queue[:0], up.queue[up.head:]...)
		up.head = 0
	}
}

// fault applies the start (or, when ending, the end) of fault k.
func (s *sim) fault(k int, ending bool, now int64) {
	f := s.sc.Faults[k]
	i := f.Upstream
	up := &s.upstreams[i]
	if ending {
		was := up.mode.Kind
		up.mode = Fault{}
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
	up.mode = f
	if f.Kind == FastFail && s.sc.Placement != nil {
		// Its connections drop; each gateway reconnects after its backoff.
		for g, c := range s.conn {
			if int(c) != i {
				continue
			}
			s.conn[g], s.orphan[g] = -1, true
			up.conns--
			d := s.rtt[g][i] / 2
			if b := s.sc.Placement.Backoff; b > 0 {
				d += int64(s.backoff[g].Float64() * float64(b))
			}
			s.q.push(event{at: now + d, kind: evConnect, a: int32(g)})
		}
	}
	if f.Kind == FastFail {
		// The connection drops: what it held fails, gateways see it down.
		up.queue, up.head = up.queue[:0], 0
		for id := range s.reqs {
			rq := &s.reqs[id]
			if int(rq.up) == i && !rq.finished && rq.sent >= now-int64(s.sc.Timeout) {
				s.q.push(event{at: now + s.rtt[s.pkts[rq.pkt].gw][i]/2, kind: evResponse, a: int32(id), b: respRefused})
			}
		}
		for _, t := range s.tables {
			t.SetUp(i, false)
		}
	}
}
