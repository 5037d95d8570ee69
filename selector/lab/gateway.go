package lab

import (
	"time"
)

// connect connects gateway g to the upstream its strategy picks, and sends
// what waited for the connection; with nothing up it tries again in a
// second.
func (s *sim) connect(g int, now int64) {
	i, ok := s.strats[g].Pick(s.tables[g], 0)
	if !ok {
		s.q.push(event{at: now + int64(time.Second), kind: evConnect, a: int32(g)})
		return
	}
	s.conn[g] = int32(i)
	s.upstreams[i].conns++
	if s.orphan[g] {
		s.lastConn = max(s.lastConn, now)
	}
	waiting := s.pending[g]
	s.pending[g] = nil
	for _, id := range waiting {
		s.dispatch(int(id), now)
	}
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
// is none), else to the upstream its strategy picks, skipping the upstreams
// resting after failures, as uplink.Delivery does. When no upstream can
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

// pick is the upstream gateway g sends to, skipping skip and the upstreams
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
// the waiting packets, oldest first, until one finds no upstream.
func (s *sim) wake(g int, now int64) {
	s.waking[g] = false
	waiting := s.buffered[g]
	s.buffered[g] = nil
	for k, id := range waiting {
		if s.waking[g] {
			// A packet found no upstream: the rest wait for the next wake.
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

// rest records a failure of upstream i on gateway g and rests it, as
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

// send sends an attempt of packet id to upstream i at now.
func (s *sim) send(id, i int, now int64) {
	sc := s.sc
	p := &s.pkts[id]
	g := int(p.gw)
	p.tries++
	p.attempts++
	if sec := int(now / int64(time.Second)); sec < len(s.perSec) {
		s.perSec[sec]++
		s.perUp[sec][i]++
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
	s.reqs = append(s.reqs, request{pkt: int32(id), up: int32(i), sent: now, tk: s.tables[g].Begin(i)})
	s.q.push(event{at: now + s.rtt[g][i]/2, kind: evReach, a: rid})
	s.q.push(event{at: now + int64(sc.Timeout), kind: evTimeout, a: rid})
}

// finish ends attempt rq with err at now: the packet is acknowledged, or
// tried on another upstream (skipping those that failed it), or, when no
// upstream can take it or it has had its attempts, back in the buffer.
func (s *sim) finish(rq *request, now int64, err error) {
	if rq.finished {
		return
	}
	rq.finished = true
	p := &s.pkts[rq.pkt]
	g, i := int(p.gw), int(rq.up)
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
	// when no upstream can take it.
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
		if j := int64(sc.Upstreams[f].JoinAt); j > 0 && p.t0 >= j && p.t0 < j+int64(joinWindow) {
			s.latJoin = append(s.latJoin, l)
		}
	}
}

// joinWindow is how long after a join JoinP99 measures.
const joinWindow = 10 * time.Second
