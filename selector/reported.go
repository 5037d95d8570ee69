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

// reportWeights are the weights of a strategy that picks by reported load:
// they carry each upstream's report expiry.
type reportWeights[W any] interface {
	*W
	reports() *expiries
}

// reportPicker is a strategy that picks by reported load from the weights
// W it publishes.
type reportPicker[W any] interface {
	recomputer[W]
	// among picks among cand, the candidates of a pick that skips skip:
	// at least two, each with a fresh report. It reads the published
	// weights w.
	among(t *Table, skip, cand uint64, w *W) (int, bool)
}

// pickReported is the Pick of cswlc and irlb: at most one candidate needs
// no weights; a candidate without a fresh load report sends the pick to
// g's counted fallback; otherwise s picks among the candidates with the
// weights r publishes.
func pickReported[W any, P reportWeights[W]](t *Table, skip uint64, s reportPicker[W], r *refresher[W], g *reportGate) (int, bool) {
	cand := t.Candidates(skip)
	if i, ok, done := atMostOne(cand); done {
		return i, ok
	}
	now := t.lastSeen()
	w := r.get(t, now, s)
	if !P(w).reports().fresh(cand, now) {
		return g.fallBack(t, skip)
	}
	return s.among(t, skip, cand, w)
}
