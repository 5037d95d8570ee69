package selector

import "sync/atomic"

// reportGate is the front shared by the strategies that need fresh
// server-reported load (cswlc, irlb): when their periodic work is due,
// until when each upstream's report is fresh, and the counted fallback to
// least_conn when a candidate's report is missing or stale.
type reportGate struct {
	due  atomic.Int64               // table time of the next refresh
	cfg  atomic.Uint64              // Table.cfg at the last refresh
	live atomic.Uint64              // Table.live at the last refresh
	exp  [MaxUpstreams]atomic.Int64 // table time until which upstream i's load is fresh

	_         [64]byte
	fallbacks atomic.Uint64
	_         [56]byte
}

// refresher is a strategy's periodic work, run by front when it is due.
type refresher interface{ refresh(t *Table, now int64) }

// front starts a Pick: no candidate, a single one, the refresh when due,
// and the fallback. done reports whether (i, ok) is already the answer;
// otherwise the caller picks among cand at table time now.
func (g *reportGate) front(t *Table, skip uint64, r refresher) (cand uint64, now int64, i int, ok, done bool) {
	cand = t.Candidates(skip)
	if cand == 0 {
		return 0, 0, -1, false, true
	}
	if cand&(cand-1) == 0 {
		return cand, 0, trailingZeros(cand), true, true
	}
	now = t.lastSeen()
	if now >= g.due.Load() || t.cfg.Load() != g.cfg.Load() || t.live.Load() != g.live.Load() {
		r.refresh(t, now)
	}
	for m := cand; m != 0; m &= m - 1 {
		if g.exp[trailingZeros(m)].Load() < now {
			g.fallbacks.Add(1)
			i, ok = leastConn{}.Pick(t, skip)
			return cand, now, i, ok, true
		}
	}
	return cand, now, 0, false, false
}
