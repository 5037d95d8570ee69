package lab

import (
	"fmt"
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

// rejectedError is an error answer from an upstream that is up (an HTTP 503,
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
	skip     uint64  // upstreams that failed it in the current round
	done     bool    // acknowledged, or given up at its deadline
	end      int64   // when it was acknowledged or given up
	measured bool
}

// request is one attempt to deliver a packet to an upstream.
type request struct {
	pkt      int32
	up       int32
	sent     int64
	tk       selector.Ticket
	finished bool
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
		if s.wait(int(e.a), now) {
			return
		}
		s.reach(int(e.a), now)
	case evTurn:
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
		for i := range s.upstreams {
			if !s.upstreams[i].joined {
				continue
			}
			if s.upstreams[i].mode.answers() {
				t.Probe(i, s.probeRTT(g, i, now), nil)
			} else {
				t.Probe(i, 0, errTimeout)
			}
		}
		s.q.push(event{at: now + int64(sc.ProbeInterval), kind: evProbe, a: e.a})
	case evRefresh:
		g := int(e.a)
		t := s.tables[g]
		for i := range s.upstreams {
			if !s.upstreams[i].joined {
				continue
			}
			if l, ok := s.report(i, now); ok {
				t.Report(i, l)
			}
		}
		s.q.push(event{at: now + int64(sc.RefreshInterval), kind: evRefresh, a: e.a})
	case evSample:
		for i := range s.upstreams {
			up := &s.upstreams[i]
			up.samples = append(up.samples, sample{at: now, util: s.util(i), queued: len(up.queue) - up.head, bsy: up.busy, conns: up.conns})
		}
		s.q.push(event{at: now + int64(sampleEvery), kind: evSample})
	case evFault:
		s.fault(int(e.a), e.b == 1, now)
	case evReconnect:
		i := int(e.a)
		if s.upstreams[i].mode.Kind != FastFail {
			for _, t := range s.tables {
				t.SetUp(i, true)
			}
		}
	case evReconnectOne:
		g, i := int(e.a>>8), int(e.a&0xff)
		if s.upstreams[i].mode.Kind != FastFail {
			s.tables[g].SetUp(i, true)
			if sec := int(now / int64(time.Second)); i == sc.Faulty && sec < len(s.reconns) {
				s.reconns[sec]++
			}
		}
	case evJoin:
		i := int(e.a)
		s.upstreams[i].joined = true
		for _, t := range s.tables {
			// validate allows at most MaxUpstreams upstreams, and none is
			// retired: the table cannot be full.
			if _, err := t.Add(fmt.Sprintf("s%d", i), sc.Upstreams[i].Workers); err != nil {
				panic(err)
			}
		}
	case evConnect:
		s.connect(int(e.a), now)
	}
}

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
