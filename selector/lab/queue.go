package lab

// event kinds.
const (
	evArrival      = iota // a = gateway: a request should be sent now
	evReach               // a = request: it reaches its upstream
	evDone                // a = request: its upstream finished serving it
	evResponse            // a = request, b = respOK, respRefused or respRejected: the gateway hears back
	evTimeout             // a = request: the gateway gives up on it
	evProbe               // a = gateway: probe every upstream
	evRefresh             // a = gateway: read every upstream's load report
	evSample              // upstreams record their state, for aged reports
	evFault               // a = index into the scenario's faults, b = 1 at its end
	evReconnect           // a = upstream: gateways see it up again
	evJoin                // a = upstream: it joins every gateway's table
	evConnect             // a = gateway: it connects (Placement scenarios)
	evWake                // a = gateway: its delivery loop looks at its buffer after a backoff
	evReconnectOne        // a = gateway<<8 | upstream: that gateway sees the upstream up again
	evTurn                // a = request: its turn under its upstream's budget came
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
