package selector

import (
	"math"
	"sync/atomic"
)

// reportGate is what cswlc and irlb share as strategies that need fresh
// server-reported load: the counted fallback to least_conn when a
// candidate's report is missing or stale.
type reportGate struct {
	_         [64]byte
	fallbacks atomic.Uint64
	_         [56]byte
}

// expiries is, by index, the table time until which each upstream's load
// report was fresh at the last recomputation; part of the weights cswlc and
// irlb publish.
type expiries [MaxUpstreams]atomic.Int64

// init marks every report stale.
func (e *expiries) init() {
	for i := range e {
		e[i].Store(math.MinInt64)
	}
}

// fresh reports whether every upstream of cand has a report fresh at table
// time now.
func (e *expiries) fresh(cand uint64, now int64) bool {
	for m := cand; m != 0; m &= m - 1 {
		if e[trailingZeros(m)].Load() < now {
			return false
		}
	}
	return true
}

// fallBack picks by least_conn and counts it.
func (g *reportGate) fallBack(t *Table, skip uint64) (int, bool) {
	g.fallbacks.Add(1)
	return leastConn{}.Pick(t, skip)
}
