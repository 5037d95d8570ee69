package selector

import (
	"fieldlink/selector/cuckoo"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// cswlcOptions configures [newCSWLC]. The zero value is the default; every
// field says what its zero value means.
type cswlcOptions struct {
	// K weighs the five capacity factors: CPU speed, memory, disk IO,
	// network, processes. Default {0.3, 0.2, 0.2, 0.2, 0.1}, the paper's
	// (its scanned text reads 6.3 for 0.3, a misprint: the five must sum to 1). Negative entries count as 0; the rest
	// are scaled to sum to 1. All zero means the default.
	K [5]float64

	// Thresholds are L1 < L2 < … < Lm on the utilisation G, in (0, 1]:
	// bucket j holds the upstreams with L_{j−1} < G ≤ L_j. Default
	// {0.25, 0.5, 0.75, 1}. Values outside (0, 1] are dropped, the rest
	// sorted and deduplicated, and 1 is added when the largest is below it,
	// so that every G lands in a bucket.
	Thresholds []float64

	// Tolerance keeps, besides the best upstream of each bucket, those
	// whose G is within Tolerance of it, so that upstreams alike share the
	// load instead of one taking a whole bucket's share for a period.
	// Default 0.02. Negative means 0: one upstream per bucket, as in the
	// paper.
	Tolerance float64

	// Period is how often, in table time, the utilisations, buckets, the
	// cuckoo search and the weights are recomputed, and the period T over
	// which usage frequency is counted. Default 1 s.
	Period time.Duration

	// ProcessLimit is the process count at which an upstream's process
	// factor is fully used. Default 0: the largest count reported by the
	// upstreams compared.
	ProcessLimit int

	// Nests, Iterations and Discovery set the cuckoo search: nests,
	// generations, and the probability P that a host discovers an egg.
	// Defaults 25, 100 and 0.25 (the paper's P).
	Nests, Iterations int
	Discovery         float64

	// Seed seeds the cuckoo search: run r is seeded with Seed + r. Default
	// 0: each run is seeded from the table's random stream
	// (Options.Seed), so a seeded table is reproducible either way.
	Seed uint64

	// IgnoreUsage drops the usage-frequency factor from the WLC weight:
	// W_s = weight_s · H_s.
	IgnoreUsage bool
}

// cswlcStrategy is "cswlc": weighted least connections inside a candidate set that
// a cuckoo search picks from utilisation buckets. Source: Guo, Zhang and
// He, "Application of load balancing algorithm in smart mine software
// platform", Industry and Mine Automation 46(5), 2020 (docs/algorithms.md
// § 002).
//
// Every Period (table time), from the upstreams' reported [Load]:
//
//  1. Capacity, the paper's H_i = K1·E_i + K2·M_i + K3·D_i + K4·N_i + K5·F_i,
//     K = {0.3, 0.2, 0.2, 0.2, 0.1}, over capacities normalised by the
//     largest among the upstreams compared (**reading**, docs/algorithms.md § 002):
//     e_i = CPUMHz_i / max CPUMHz, m_i = MemoryMB_i / max MemoryMB,
//     n_i = BandwidthMbps_i / max BandwidthMbps. A Load reports no disk IO
//     rate and no process limit, so d_i = f_i = 1: equal on those factors.
//     A capacity that no upstream reports (every value 0) is 1 for all.
//  2. Real-time use H'_i, the same sum over the capacities in use: each
//     capacity times its utilisation (CPU, Memory, DiskIO, Network), and
//     for processes Processes / ProcessLimit (default: the largest count
//     reported), capped at 1. Utilisation G_i = H'_i / H_i, in [0, 1]: the
//     K-and-capacity-weighted mean of the utilisations. (An upstream of
//     capacity 0 has G = 1.)
//  3. Buckets by the thresholds L1 < … < Lm: gs_j holds the upstreams with
//     L_{j−1} < G ≤ L_j.
//  4. A cuckoo search (Lévy flights by Mantegna's method, discovery
//     probability 0.25, a bounded number of generations, seeded; see
//     selector/cuckoo) over the buckets finds the better candidates: one
//     coordinate per bucket of two or more upstreams, x_j in [0, |gs_j|)
//     naming its ⌊x_j⌋-th member, minimising Σ_j G of the members named, so
//     that the optimum is the least-utilised upstream of every bucket. The
//     candidate set is those, every upstream alone in its bucket, and
//     (departure) every upstream within Tolerance of its bucket's best.
//  5. WLC weights, **reading** of "the weight is proportional to connection
//     count and usage frequency over the period T": the configured weight
//     scaled by capacity and by usage, W_s = weight_s · H_s · (1 + φ_s),
//     φ_s the share of the deliveries that ended in the last period that
//     went to s (so W varies by at most 2×).
//
// A pick then sends to the candidate-set upstream that minimises C_s / W_s,
// the paper's formula (7), C_s the deliveries in flight to s (compared by
// cross-multiplication; ties at random, from the table's stream). When
// every member of the set is down or skipped (a retry), it is the minimum
// over every candidate.
//
// Load: a report is fresh for Options.LoadTTL after its At. A pick with a
// candidate that has no fresh report falls back to least_conn over all the
// candidates (never a guess at its utilisation: the normalisation in 1 is
// across servers and is not defined with one missing), and counts one in
// [cswlcStrategy.Fallbacks]. A pick with one candidate picks it, and is not a
// fallback.
//
// Cost: the recomputation (a cuckoo search of 25 nests × 100 generations
// per bucket of two or more upstreams, about 0.35 ms per such bucket on a
// 2 GHz-class core, and a lock on each upstream to copy its load; raise
// Period to spend less) runs on the pick that
// first finds the table's latest time reading past the due time, or the
// table changed (Add, Retire, SetUp, a weight), under TryLock (see
// refresher): other picks do not wait and use the weights published before. Pick itself reads atomics
// only, takes no lock and does not allocate; a recomputation does not
// allocate either once its buffers have grown.
type cswlcStrategy struct {
	k           [5]float64
	thresholds  []float64
	tolerance   float64
	procLimit   float64
	seed        uint64
	ignoreUsage bool

	ref refresher[cswlcPublished]
	reportGate

	// The recomputation's own state, guarded by ref.mu.
	cs      *cuckoo.Search
	runs    uint64
	lastUp  [MaxUpstreams]*upstream
	lastReq [MaxUpstreams]uint64
	members [][]int // by bucket
	dims    []int   // buckets searched
	lo, hi  []float64
	g       [MaxUpstreams]float64
}

// cswlcPublished is what a recomputation publishes for picks.
type cswlcPublished struct {
	set atomic.Uint64               // the candidate set
	w   [MaxUpstreams]atomic.Uint64 // float64 bits of W_s
	exp expiries
}

// newCSWLC returns a cswlc strategy.
func newCSWLC(opt cswlcOptions) *cswlcStrategy {
	s := &cswlcStrategy{
		k:           cswlcWeights(opt.K),
		thresholds:  cswlcThresholds(opt.Thresholds),
		tolerance:   opt.Tolerance,
		procLimit:   float64(opt.ProcessLimit),
		seed:        opt.Seed,
		ignoreUsage: opt.IgnoreUsage,
		cs:          cuckoo.New(opt.Nests, opt.Iterations, opt.Discovery),
	}
	if s.tolerance == 0 {
		s.tolerance = 0.02
	}
	s.tolerance = max(s.tolerance, 0)
	period := int64(opt.Period)
	if period <= 0 {
		period = int64(time.Second)
	}
	s.ref.init(period, true)
	for i := range s.ref.buf {
		s.ref.buf[i].exp.init()
	}
	s.members = make([][]int, len(s.thresholds))
	for j := range s.members {
		s.members[j] = make([]int, 0, MaxUpstreams)
	}
	return s
}

// cswlcWeights returns K scaled to sum 1, or the paper's K.
func cswlcWeights(k [5]float64) [5]float64 {
	var sum float64
	for i := range k {
		k[i] = max(k[i], 0)
		sum += k[i]
	}
	if !(sum > 0) || math.IsInf(sum, 0) {
		return [5]float64{0.3, 0.2, 0.2, 0.2, 0.1}
	}
	for i := range k {
		k[i] /= sum
	}
	return k
}

// cswlcThresholds returns the thresholds sorted, deduplicated, within
// (0, 1] and ending at 1 or above, or the default.
func cswlcThresholds(l []float64) []float64 {
	var out []float64
	for _, x := range l {
		if x > 0 && x <= 1 {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return []float64{0.25, 0.5, 0.75, 1}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if out[len(out)-1] < 1 {
		out = append(out, 1)
	}
	return out
}

// Name is "cswlc".
func (*cswlcStrategy) Name() string { return "cswlc" }

// Fallbacks is the number of picks that fell back to least_conn because a
// candidate had no fresh load report.
func (s *cswlcStrategy) Fallbacks() uint64 { return s.fallbacks.Load() }

// Pick picks as the type's doc describes.
func (s *cswlcStrategy) Pick(t *Table, skip uint64) (int, bool) {
	cand := t.Candidates(skip)
	if i, ok, done := atMostOne(cand); done {
		return i, ok
	}
	now := t.lastSeen()
	p := s.ref.get(t, now, s)
	if !p.exp.fresh(cand, now) {
		return s.fallBack(t, skip)
	}
	set := cand & p.set.Load()
	if set == 0 {
		set = cand
	}
	return cswlcPickMin(t, set, &p.w)
}

// cswlcPickMin returns the upstream of the non-empty mask set with the
// fewest deliveries in flight per unit of w (float64 bits), ties at random.
// A weight that is not above 0 counts as the smallest positive float.
func cswlcPickMin(t *Table, set uint64, w *[MaxUpstreams]atomic.Uint64) (int, bool) {
	first := trailingZeros(set)
	ties := uint64(1) << first
	bestC := float64(inflight(t.slots[first].state.Load()))
	bestW := cswlcPositive(math.Float64frombits(w[first].Load()))
	for m := set & (set - 1); m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		c := float64(inflight(t.slots[i].state.Load()))
		wi := cswlcPositive(math.Float64frombits(w[i].Load()))
		if l, r := c*bestW, bestC*wi; l < r {
			ties, bestC, bestW = 1<<i, c, wi
		} else if l == r {
			ties |= 1 << i
		}
	}
	return pickTie(t, ties), true
}

// cswlcPositive returns w, or the smallest positive float64 when w is not
// above 0 (or NaN).
func cswlcPositive(w float64) float64 {
	if !(w > 0) {
		return math.SmallestNonzeroFloat64
	}
	return w
}

// cswlcFreshLoad returns upstream u's latest report and the table time until
// which it is fresh, and whether it is fresh at table time now. cswlc and
// irlb read loads through it.
func cswlcFreshLoad(t *Table, u *upstream, now int64) (Load, int64, bool) {
	u.mu.Lock()
	l, ok := u.load, u.hasLoad
	u.mu.Unlock()
	if !ok {
		return Load{}, math.MinInt64, false
	}
	exp := int64(l.At.Sub(t.epoch)) + int64(t.loadTTL)
	return l, exp, now <= exp
}

// recompute computes the candidate set and the weights into p, and carries
// over the weights of the upstreams without a fresh report.
func (s *cswlcStrategy) recompute(t *Table, now int64, p *cswlcPublished) {
	live := t.live.Load()
	n := t.Len()
	var loads [MaxUpstreams]Load
	var used [MaxUpstreams]float64
	var fresh uint64
	var total float64
	for i := range n {
		u := t.ups[i].Load()
		if s.lastUp[i] != u {
			s.lastUp[i], s.lastReq[i] = u, u.requests.Load()
		}
		r := u.requests.Load()
		used[i], s.lastReq[i] = float64(r-s.lastReq[i]), r
		l, exp, ok := cswlcFreshLoad(t, u, now)
		p.exp[i].Store(exp)
		if live&(1<<i) != 0 {
			total += used[i]
			if ok {
				loads[i], fresh = l, fresh|1<<i
			}
		}
	}
	var h [MaxUpstreams]float64
	cswlcUtilisation(&s.k, &loads, fresh, s.procLimit, &h, &s.g)
	seed := s.seed + s.runs
	if s.seed == 0 {
		seed = t.rand64()
	}
	s.runs++
	p.set.Store(s.candidates(fresh, seed))
	prev := s.ref.published()
	for i := range MaxUpstreams {
		if fresh&(1<<i) == 0 {
			p.w[i].Store(prev.w[i].Load())
			continue
		}
		w := float64(t.slots[i].weight.Load()) * h[i]
		if !s.ignoreUsage && total > 0 {
			w *= 1 + used[i]/total
		}
		p.w[i].Store(math.Float64bits(w))
	}
}

// cswlcUtilisation computes, for every upstream in mask, its capacity H
// and utilisation G from its load, by steps 1 and 2 of [cswlcStrategy]'s doc.
func cswlcUtilisation(k *[5]float64, loads *[MaxUpstreams]Load, mask uint64, procLimit float64, h, g *[MaxUpstreams]float64) {
	var maxE, maxM, maxN, maxF float64
	for m := mask; m != 0; m &= m - 1 {
		l := &loads[trailingZeros(m)]
		maxE, maxM = max(maxE, l.CPUMHz), max(maxM, l.MemoryMB)
		maxN, maxF = max(maxN, l.BandwidthMbps), max(maxF, float64(l.Processes))
	}
	if procLimit > 0 {
		maxF = procLimit
	}
	norm := func(x, top float64) float64 {
		if !(top > 0) {
			return 1 // nobody reports it: equal
		}
		return max(x, 0) / top
	}
	use := func(u float64) float64 { return min(max(u, 0), 1) }
	for m := mask; m != 0; m &= m - 1 {
		i := trailingZeros(m)
		l := &loads[i]
		e, mem, n := norm(l.CPUMHz, maxE), norm(l.MemoryMB, maxM), norm(l.BandwidthMbps, maxN)
		f := 0.0
		if maxF > 0 {
			f = min(max(float64(l.Processes), 0)/maxF, 1)
		}
		h[i] = k[0]*e + k[1]*mem + k[2] + k[3]*n + k[4]
		hu := k[0]*e*use(l.CPU) + k[1]*mem*use(l.Memory) + k[2]*use(l.DiskIO) + k[3]*n*use(l.Network) + k[4]*f
		g[i] = 1
		if h[i] > 0 {
			g[i] = min(hu/h[i], 1)
		}
	}
}

// cswlcBucket returns the bucket of utilisation g: the first j with
// g ≤ thresholds[j], and the last bucket past them all.
func cswlcBucket(g float64, thresholds []float64) int {
	for j, l := range thresholds {
		if g <= l {
			return j
		}
	}
	return len(thresholds) - 1
}

// candidates buckets the upstreams of mask by s.g, runs the cuckoo search
// over the buckets, and returns the candidate set (step 4). s.ref.mu is held.
func (s *cswlcStrategy) candidates(mask uint64, seed uint64) uint64 {
	for j := range s.members {
		s.members[j] = s.members[j][:0]
	}
	for m := mask; m != 0; m &= m - 1 {
		i := trailingZeros(m)
		b := cswlcBucket(s.g[i], s.thresholds)
		s.members[b] = append(s.members[b], i)
	}
	var set uint64
	s.dims, s.lo, s.hi = s.dims[:0], s.lo[:0], s.hi[:0]
	for j, mem := range s.members {
		switch len(mem) {
		case 0:
		case 1:
			set |= 1 << mem[0]
		default:
			s.dims = append(s.dims, j)
			s.lo = append(s.lo, 0)
			s.hi = append(s.hi, float64(len(mem)))
		}
	}
	if len(s.dims) == 0 {
		return set
	}
	best, _ := s.cs.Minimize(s.fitness, s.lo, s.hi, seed)
	for d, j := range s.dims {
		mem := s.members[j]
		gBest := s.g[mem[s.member(d, best[d])]]
		for _, i := range mem {
			if s.g[i] <= gBest+s.tolerance {
				set |= 1 << i
			}
		}
	}
	return set
}

// member is the index in bucket s.dims[d] that coordinate x names.
func (s *cswlcStrategy) member(d int, x float64) int {
	return min(max(int(x), 0), len(s.members[s.dims[d]])-1)
}

// fitness is the cuckoo search's objective: the sum of the utilisations of
// the upstreams that x names, one per bucket searched.
func (s *cswlcStrategy) fitness(x []float64) float64 {
	var sum float64
	for d, xd := range x {
		sum += s.g[s.members[s.dims[d]][s.member(d, xd)]]
	}
	return sum
}
