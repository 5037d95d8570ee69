package selector

import (
	"math"
	"sync"
	"sync/atomic"
)

// refresher holds the weights that soa, load_aware, drf, ribbon_wrt, cswlc
// and irlb compute from the whole table, so that Pick reads them instead of
// computing them.
//
// One rule says when they are stale: a period of table time has passed
// since they were computed, or the table's version changed (an upstream
// added, retired, up, down or reweighted) when onChange is set. The first
// pick that finds them stale recomputes them, under a TryLock, into the
// buffer no pick is told to read, then publishes it; the other picks do not
// wait and read the weights published before. Pick reads the table's latest
// time reading, not the clock, and nothing here allocates.
//
// A pick that stalls through two recomputations may read a buffer being
// rewritten: W's fields are atomics, and a pick must still return a
// candidate whatever it reads.
type refresher[W any] struct {
	period   int64   // table time between recomputations, ns
	onChange bool    // also recompute when the table's version changed
	jitter   float64 // each period is drawn from period·(1 ± jitter)

	mu  sync.Mutex    // one recomputation at a time; guards the recomputer's own state
	due atomic.Int64  // table time of the next recomputation
	ver atomic.Uint64 // the table's version the published weights were computed for
	cur atomic.Pointer[W]
	buf [2]W
}

// recomputer computes a strategy's weights into w from table t at table
// time now. It runs with the refresher's mu held.
type recomputer[W any] interface {
	recompute(t *Table, now int64, w *W)
}

// init sets the period (ns) and the rule; the first get recomputes.
func (r *refresher[W]) init(period int64, onChange bool) {
	r.period, r.onChange = period, onChange
	r.cur.Store(&r.buf[0])
	r.expire()
}

// expire makes the next get recompute.
func (r *refresher[W]) expire() { r.due.Store(math.MinInt64) }

// stale reports whether the published weights are due for recomputation.
func (r *refresher[W]) stale(t *Table, now int64) bool {
	return now >= r.due.Load() || r.onChange && t.version() != r.ver.Load()
}

// get returns the published weights, recomputed by c first when they are
// stale and no other goroutine is at it.
func (r *refresher[W]) get(t *Table, now int64, c recomputer[W]) *W {
	if r.stale(t, now) {
		r.refresh(t, now, c)
	}
	return r.cur.Load()
}

// refresh recomputes and publishes the weights, unless another goroutine
// is at it or just did it.
func (r *refresher[W]) refresh(t *Table, now int64, c recomputer[W]) {
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	if !r.stale(t, now) {
		return
	}
	ver := t.version() // before the table is read: a change meanwhile makes the result stale
	next := &r.buf[0]
	if r.cur.Load() == next {
		next = &r.buf[1]
	}
	c.recompute(t, now, next)
	r.cur.Store(next)
	r.ver.Store(ver)
	d := r.period
	if r.jitter > 0 {
		d = int64(float64(d) * (1 + r.jitter*(2*t.float01()-1)))
	}
	r.due.Store(now + d)
}

// published returns the weights picks read now. Under mu, a recomputer
// reads them to carry over what it does not recompute.
func (r *refresher[W]) published() *W { return r.cur.Load() }
