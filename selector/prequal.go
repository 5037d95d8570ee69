package selector

import (
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// prequal is "prequal": the hot-cold lexicographic rule of Google's prequal
// (Wydrowski, Kleinberg, Rumble, Archer, "Load is not what you should
// balance: Introducing prequal", NSDI 2024; docs/algorithms.md, prequal),
// an anchor to measure the other strategies against. It keeps a pool of
// recent probes, each a server's requests in flight (RIF) and latency, and
// picks from the pool:
//
//	hot   = RIF > the Q_RIF quantile of the RIFs in the pool
//	pick  = the cold candidate of lowest latency;
//	        when every candidate is hot, the one of lowest RIF
//
// Exact ties are broken uniformly at random. With fewer than 2 usable
// probes (in the pool and candidates of this pick), the pick is uniform
// among the candidates, as in the paper.
//
// Probes. prequal's clients probe random servers asynchronously, about 3
// per query, and the server answers with its RIF and latency. A gateway
// asks its table instead: at every pick, 3 upstreams drawn uniformly (with
// replacement) among those up are probed, and a probe carries what the
// table has learned about the upstream:
//
//   - latency: the median of the upstream's latest delivery latencies
//     (Table.End, failed or not; the table's window, Options.Window, at most
//     its latest 64), else its latest probe round-trip (Table.Probe), else 0
//     (nothing known: tried first, as p2c_ewma's DefaultRTT). prequal's
//     servers report the median latency of their recent queries at about
//     the current RIF; the table does not record RIF per delivery, so the
//     median is over all of them. The median, not the EWMA: it is the
//     paper's statistic, and one outlier does not move it.
//   - RIF: the upstream's Load.Connections when it has a fresh report, plus
//     one for every pick of a probe of that report (the paper's bump: our
//     deliveries the report has not seen; every probe of one report is the
//     same information, so they share the bumps), otherwise the gateway's own in-flight count, read live at each pick as
//     p2c_ewma does (Begin counts our deliveries: no bump to add).
//
// Taking only the table's events (delivery ends, probe round-trips) as
// probes would close a loop: only a picked upstream ends deliveries, so
// the pool would hold the upstreams already chosen and starve the others.
// Drawing the probed upstreams at random is what prequal's sampling is,
// and a read of the table costs nothing.
//
// Constants the paper leaves open or that do not carry over, and what is
// used (prequalOptions changes them):
//
//   - Q_RIF = 2^−0.25 ≈ 0.84, the paper's default. The quantile is
//     interpolated between order statistics (R's type 7): with the
//     nearest-rank quantile a pool of 6 probes or fewer, the usual case with
//     a handful of upstreams, would never hold a hot probe.
//   - Pool: 16 probes, one per upstream (a newer probe of an upstream
//     replaces the older, which says nothing the newer does not); a new
//     upstream's probe in a full pool replaces the oldest.
//   - Age: a probe older than 1 s (table time) is dropped.
//   - Removal: one probe per pick, alternately the oldest and the worst
//     (the hot probe of highest RIF, else the cold one of highest latency):
//     3 probes in and 1 out per query.
//   - Reuse budget: a probe is dropped after serving 16 picks. The paper's
//     budget, max{1, (1+δ)/((1−m/n)·r_probe − r_remove)} with m the pool
//     size and n the servers, has a denominator ≤ 0 for n ≤ 24 at m = 16,
//     r_probe = 3, r_remove = 1, which covers the gateway's case.
//   - Fewer than 2 usable probes: uniform random, as in the paper.
//
// Failures: the paper says nothing of them, and nothing is added here. A
// failed delivery's latency enters the median like any other, so an
// upstream that fails fast while it accepts deliveries looks fast and, its
// RIF staying low, wins the cold picks: the paper's known weak spot
// ("sinkholing"). A timed-out delivery enters with its long latency and
// looks slow once it is most of the window. Only a down upstream
// ([Table.SetUp]) is left out, as by every strategy.
//
// Off the pick path, a refresher recomputes each upstream's median (when a
// delivery ended since) and reads its load report, under the upstream's
// lock, at most once per millisecond of table time, and publishes them in
// atomics (see refresher). Pick takes the strategy's own mutex to update
// the pool (scans of at most 16 probes, as weighted_round_robin scans its
// peers), reads the time as the table's latest reading, and does not
// allocate.
type prequal struct {
	qrif   float64
	maxAge int64 // ns
	size   int   // pool capacity
	reuse  int32

	ref refresher[prequalObs]

	mu          sync.Mutex
	gen         uint64 // Table.gen as of owner
	pool        uint64 // bit i: upstream i has a probe in the pool
	probes      [MaxUpstreams]prequalProbe
	owner       [MaxUpstreams]*upstream // whose probe probes[i] is
	bumps       [MaxUpstreams]int64     // picks of upstream i since its report of time bumpRep[i]
	bumpRep     [MaxUpstreams]int64
	removeWorst bool // the next removal takes the worst, not the oldest
}

// prequalOptions configures [newPrequal]. The zero value is the default.
type prequalOptions struct {
	// QRIF is the RIF quantile above which a probe is hot. Default 0.84
	// (2^−0.25); a negative value means 0 (every probe above the lowest RIF
	// is hot: RIF first, latency between equal RIFs). Values above 1 mean 1.
	QRIF float64
	// Pool is the most probes kept. Default 16, at most MaxUpstreams.
	Pool int
	// MaxAge is the age past which a probe is dropped. Default 1 s.
	MaxAge time.Duration
	// ReuseBudget is how many picks a probe serves before it is dropped.
	// Default 16.
	ReuseBudget int
}

// prequalProbes is how many upstreams each pick probes (r_probe).
const prequalProbes = 3

// prequalProbe is one probe in the pool.
type prequalProbe struct {
	at    int64 // table time of the probe
	lat   int64 // ns
	conns int64 // reported connections, −1 when no fresh report
	until int64 // table time until which that report is fresh
	repAt int64 // the report's At, ns since the table's epoch
	uses  int32
}

// prequalObs is what the refresher publishes about every upstream.
type prequalObs struct {
	up [MaxUpstreams]prequalObsUp
	// The refresher's own state, guarded by its mu: the request count each
	// median was computed at, and whose.
	owner    [MaxUpstreams]*upstream
	requests [MaxUpstreams]uint64
}

// prequalObsUp is one upstream's latency median (0: no delivery ended) and
// load report (conns −1: none fresh), in the fields of a prequalProbe.
type prequalObsUp struct {
	lat, conns, until, repAt atomic.Int64
}

// newPrequal returns a prequal strategy.
func newPrequal(opt prequalOptions) *prequal {
	s := &prequal{qrif: opt.QRIF, maxAge: int64(opt.MaxAge), size: opt.Pool, reuse: 16}
	switch {
	case s.qrif == 0:
		s.qrif = math.Exp2(-0.25)
	case s.qrif < 0:
		s.qrif = 0
	case s.qrif > 1:
		s.qrif = 1
	}
	if s.maxAge <= 0 {
		s.maxAge = int64(time.Second)
	}
	if s.size <= 0 {
		s.size = 16
	}
	s.size = min(s.size, MaxUpstreams)
	if opt.ReuseBudget > 0 {
		s.reuse = int32(min(opt.ReuseBudget, math.MaxInt32))
	}
	s.ref.init(int64(time.Millisecond), true)
	return s
}

func (*prequal) Name() string { return "prequal" }

func (s *prequal) Pick(t *Table, skip uint64) (int, bool) {
	now := t.lastSeen()
	obs := s.ref.get(t, now, s)
	live := t.Candidates(0)
	cand := live &^ skip
	if cand == 0 {
		return -1, false
	}
	r := t.rand64()
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := t.gen.Load(); g != s.gen { // an upstream added or retired: drop probes of former owners
		s.gen = g
		for m := s.pool; m != 0; m &= m - 1 {
			i := trailingZeros(m) & (MaxUpstreams - 1)
			if t.ups[i].Load() != s.owner[i] {
				s.pool &^= 1 << i
			}
		}
	}
	s.pool &= live
	for m := s.pool; m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		if s.probes[i].at < now-s.maxAge {
			s.pool &^= 1 << i
		}
	}
	n := uint64(bits.OnesCount64(live))
	for k := range prequalProbes { // 21 bits of r per draw
		s.probe(t, nthBit(live, int((r>>(21*k)&(1<<21-1))*n>>21)), obs, now)
	}
	usable := s.pool & cand
	var i int
	if bits.OnesCount64(usable) < 2 {
		i = nthBit(cand, t.intN(bits.OnesCount64(cand)))
	} else {
		i = s.choose(t, now, usable)
		p := &s.probes[i]
		p.uses++
		if p.conns >= 0 {
			if s.bumpRep[i] != p.repAt {
				s.bumpRep[i], s.bumps[i] = p.repAt, 0
			}
			s.bumps[i]++
		}
		if p.uses >= s.reuse {
			s.pool &^= 1 << i
		}
	}
	if s.pool != 0 {
		s.remove(t, now)
	}
	return i, true
}

// probe puts a probe of upstream i at table time now into the pool; s.mu
// is held.
func (s *prequal) probe(t *Table, i int, obs *prequalObs, now int64) {
	o, p, u := &obs.up[i], &s.probes[i], t.ups[i].Load()
	np := prequalProbe{at: now, lat: o.lat.Load(), conns: o.conns.Load(), until: o.until.Load(), repAt: o.repAt.Load()}
	if np.lat == 0 {
		np.lat = u.probeRTT.Load()
	}
	if s.pool&(1<<i) == 0 && bits.OnesCount64(s.pool) >= s.size {
		s.pool &^= 1 << s.oldest(t)
	}
	*p = np
	s.owner[i] = u
	s.pool |= 1 << i
}

// rif is the RIF of probe i at table time now; s.mu is held.
func (s *prequal) rif(t *Table, i int, now int64) int64 {
	if p := &s.probes[i]; p.conns >= 0 && p.until >= now {
		if s.bumpRep[i] == p.repAt {
			return p.conns + s.bumps[i]
		}
		return p.conns
	}
	return inflight(t.slots[i].state.Load())
}

// threshold is the Q_RIF quantile of the RIFs of the pool, interpolated
// between order statistics; s.mu is held.
func (s *prequal) threshold(t *Table, now int64) float64 {
	var r [MaxUpstreams]int64
	k := 0
	for m := s.pool; m != 0; m &= m - 1 {
		r[k] = s.rif(t, trailingZeros(m)&(MaxUpstreams-1), now)
		k++
	}
	return quantile(r[:k], s.qrif)
}

// quantile returns the q-quantile of x (sorted in place), interpolated
// between order statistics: x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]),
// h = (len(x) − 1)·q.
func quantile(x []int64, q float64) float64 {
	if len(x) == 0 {
		return 0
	}
	for a := 1; a < len(x); a++ { // insertion sort: at most 64, usually ≤ 16
		for b := a; b > 0 && x[b] < x[b-1]; b-- {
			x[b], x[b-1] = x[b-1], x[b]
		}
	}
	h := float64(len(x)-1) * q
	lo := int(h)
	if lo >= len(x)-1 {
		return float64(x[len(x)-1])
	}
	return float64(x[lo]) + (h-float64(lo))*float64(x[lo+1]-x[lo])
}

// choose applies the hot-cold rule to the probes of usable; s.mu is held.
func (s *prequal) choose(t *Table, now int64, usable uint64) int {
	th := s.threshold(t, now)
	var coldTies, hotTies uint64
	bestLat, bestRIF := int64(math.MaxInt64), int64(math.MaxInt64)
	for m := usable; m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		r := s.rif(t, i, now)
		if float64(r) > th {
			if coldTies != 0 {
				continue
			}
			switch {
			case r < bestRIF:
				hotTies, bestRIF = 1<<i, r
			case r == bestRIF:
				hotTies |= 1 << i
			}
			continue
		}
		switch l := s.probes[i].lat; {
		case l < bestLat:
			coldTies, bestLat = 1<<i, l
		case l == bestLat:
			coldTies |= 1 << i
		}
	}
	if coldTies != 0 {
		return pickTie(t, coldTies)
	}
	return pickTie(t, hotTies)
}

// oldest is the pool's oldest probe, ties broken at random (a fixed order
// would favour some upstreams); the pool is not empty and s.mu is held.
func (s *prequal) oldest(t *Table) int {
	var ties uint64
	at := int64(math.MaxInt64)
	for m := s.pool; m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		switch a := s.probes[i].at; {
		case a < at:
			ties, at = 1<<i, a
		case a == at:
			ties |= 1 << i
		}
	}
	return pickTie(t, ties)
}

// remove drops one probe, the oldest and the worst in turn; the pool is not
// empty and s.mu is held.
func (s *prequal) remove(t *Table, now int64) {
	s.removeWorst = !s.removeWorst
	if !s.removeWorst {
		s.pool &^= 1 << s.worst(t, now)
		return
	}
	s.pool &^= 1 << s.oldest(t)
}

// worst is the pool's worst probe: the hot one of highest RIF or, when none
// is hot, the one of highest latency, ties broken at random; s.mu is held.
func (s *prequal) worst(t *Table, now int64) int {
	th := s.threshold(t, now)
	var ties uint64
	hot, key := false, int64(math.MinInt64)
	for m := s.pool; m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		r := s.rif(t, i, now)
		h := float64(r) > th
		k := s.probes[i].lat
		if h {
			k = r
		}
		switch {
		case h && !hot || h == hot && k > key:
			ties, hot, key = 1<<i, h, k
		case h == hot && k == key:
			ties |= 1 << i
		}
	}
	return pickTie(t, ties)
}

// recompute publishes the latency median of every upstream that had a
// delivery end since the last one, and every upstream's load report.
func (s *prequal) recompute(t *Table, now int64, w *prequalObs) {
	prev := s.ref.published()
	if prev != w {
		w.owner, w.requests = prev.owner, prev.requests
		for i := range w.up {
			w.up[i].lat.Store(prev.up[i].lat.Load())
		}
	}
	for i := range t.Len() {
		u, o := t.ups[i].Load(), &w.up[i]
		if w.owner[i] != u {
			w.owner[i], w.requests[i] = u, 0
			o.lat.Store(0)
		}
		conns, until, repAt := int64(-1), int64(math.MinInt64), int64(0)
		u.mu.Lock()
		if req := u.requests.Load(); req != w.requests[i] && u.ringLen > 0 {
			w.requests[i] = req
			o.lat.Store(max(windowMedian(u.ring, u.ringNext, u.ringLen), 1))
		}
		if u.hasLoad {
			repAt = int64(u.load.At.Sub(t.epoch))
			until = repAt + int64(t.loadTTL)
			if until >= now {
				conns = int64(max(u.load.Connections, 0))
			}
		}
		u.mu.Unlock()
		o.conns.Store(conns)
		o.until.Store(until)
		o.repAt.Store(repAt)
	}
}

// windowMedian is the median of the latest min(n, 64) latencies of a ring
// whose next write goes to ring[next].
func windowMedian(ring []int64, next, n int) int64 {
	var x [64]int64
	k := min(n, len(x))
	for j := range k {
		x[j] = ring[(next-k+j+len(ring))%len(ring)]
	}
	slices.Sort(x[:k])
	if k%2 == 1 {
		return x[k/2]
	}
	return x[k/2-1] + (x[k/2]-x[k/2-1])/2
}
