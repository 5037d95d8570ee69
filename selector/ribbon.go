package selector

import (
	"math"
	"sync/atomic"
)

// ribbonWRT is "ribbon_wrt": Netflix Ribbon's WeightedResponseTimeRule
// (ribbon-loadbalancer, WeightedResponseTimeRule.java), with its quirks.
//
// Every StrategyOptions.WeightInterval (30 s), and at the first pick, the
// weights are recomputed from each upstream's lifetime mean latency avg_i
// in milliseconds (Ribbon's ServerStats.getResponseTimeAvg, which never
// forgets; 0 for an upstream with no delivery yet), over every upstream
// that is not retired, up or down, as Ribbon's getAllServers:
//
//	w_i = Σ_j avg_j − avg_i
//
// A pick draws r uniformly in [0, Σ w) and takes the first upstream whose
// running sum of weights exceeds r, so upstream i is picked with
// probability w_i / Σ w. (Ribbon takes the first sum ≥ r, which differs only
// when r lands exactly on a sum, and can then return a server of weight 0.)
// Ribbon draws over every server and draws again when the one drawn is not
// alive; drawing over the candidates only (up, not retired, not skipped)
// gives the same distribution without the loop.
//
// Quirks kept from Ribbon:
//   - Until the first refresh that sees latencies, while the total weight is
//     below 0.001, and when the set of upstreams has changed since the last
//     refresh (Ribbon: the server count differs from the weight list's), it
//     is round robin (Ribbon's RoundRobinRule, here [roundRobin]).
//   - The weights are stale between refreshes, and the average is lifetime,
//     so a server that turns slow keeps its share for a long time.
//   - The contrast is weak beyond two servers: with two, w_i = avg_other, a
//     share inversely proportional to latency; with averages 10, 10 and
//     100 ms, the slow server still gets 20/240 ≈ 8%.
//   - An upstream never used has average 0 and so the largest weight.
//
// If every candidate has weight 0 (Ribbon would spin), it is round robin.
//
// Ribbon refreshes from a timer thread. Here the refresh is made by the
// first pick that finds the table's latest time reading (by Begin, End,
// Probe, Report or Snapshot, to the millisecond) past the due time (see
// refresher, without its recomputation on a table change); Pick itself
// does not read the clock.
type ribbonWRT struct {
	rr roundRobin
	// Recomputed every WeightInterval only, not when the table changes:
	// Ribbon's timer, and the round robin meanwhile, are the rule copied.
	ref refresher[ribbonWeights]
}

// ribbonWeights is one computed weight table.
type ribbonWeights struct {
	gen   atomic.Uint64               // Table.gen it was computed for
	total atomic.Uint64               // float64 bits: Σ w, Ribbon's maxTotalWeight
	w     [MaxUpstreams]atomic.Uint64 // float64 bits, by index

	// The running sums of the weights over the candidates as they were at
	// the refresh (mask), ready for the usual pick, when nothing is down or
	// skipped since: sums[k] is Σ w over the first k+1 of them with w > 0,
	// of index at[k].
	mask atomic.Uint64
	n    atomic.Int32
	sums [MaxUpstreams]atomic.Uint64 // float64 bits
	at   [MaxUpstreams]atomic.Uint32
}

func newRibbonWRT(opt StrategyOptions) Strategy {
	s := new(ribbonWRT)
	s.ref.init(int64(opt.WeightInterval), false)
	return s
}

func (*ribbonWRT) Name() string { return "ribbon_wrt" }

func (s *ribbonWRT) Pick(t *Table, skip uint64) (int, bool) {
	wt := s.ref.get(t, t.lastSeen(), s)
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	if math.Float64frombits(wt.total.Load()) < 0.001 || wt.gen.Load() != t.gen.Load() {
		return s.rr.Pick(t, skip)
	}
	if cand == wt.mask.Load() {
		k := int(wt.n.Load())
		if k == 0 {
			return s.rr.Pick(t, skip)
		}
		r := t.float01() * math.Float64frombits(wt.sums[k-1].Load())
		// A picker that stalled through two refreshes could read a
		// rewritten table: it must still return a candidate.
		if i := int(wt.at[searchAtomic(&wt.sums, k, math.Float64bits(r))].Load()); cand&(1<<i) != 0 {
			return i, true
		}
	}
	var sums [MaxUpstreams]uint64
	var at [MaxUpstreams]uint8
	k, sum := 0, 0.0
	for m := cand; m != 0; m &= m - 1 {
		i := trailingZeros(m)
		if w := math.Float64frombits(wt.w[i].Load()); w > 0 {
			sum += w
			sums[k], at[k] = math.Float64bits(sum), uint8(i)
			k++
		}
	}
	if k == 0 {
		return s.rr.Pick(t, skip)
	}
	r := t.float01() * sum
	return int(at[search(&sums, k, math.Float64bits(r))]), true
}

// search returns the first j in [0, k) with sums[j] > r, for sums that rise
// with j, or k−1 when r is past them all (a rounding error). The sums and r
// are float64 bits of numbers ≥ 0, which order as the numbers do and stay
// below 2⁶³, so that (r − x) >> 63 is 1 exactly when x > r: the bisection
// runs on arithmetic, without a branch that a random r would mispredict.
func search(sums *[MaxUpstreams]uint64, k int, r uint64) int {
	base, n := 0, k
	for n > 1 {
		half := n / 2
		base += half &^ -int((r-sums[base+half-1])>>63)
		n -= half
	}
	base += 1 - int((r-sums[base])>>63)
	return min(base, k-1)
}

// searchAtomic is search over atomics.
func searchAtomic(sums *[MaxUpstreams]atomic.Uint64, k int, r uint64) int {
	base, n := 0, k
	for n > 1 {
		half := n / 2
		base += half &^ -int((r-sums[base+half-1].Load())>>63)
		n -= half
	}
	base += 1 - int((r-sums[base].Load())>>63)
	return min(base, k-1)
}

// recompute computes the weights from the lifetime averages.
func (s *ribbonWRT) recompute(t *Table, _ int64, wt *ribbonWeights) {
	gen := t.gen.Load()
	n := t.Len()
	var avg [MaxUpstreams]float64
	var live [MaxUpstreams]bool
	var sum float64
	for i := range n {
		u := t.ups[i].Load()
		if u.retired.Load() {
			continue
		}
		u.mu.Lock()
		m, _ := u.lifetime()
		u.mu.Unlock()
		avg[i], live[i] = m/1e6, true
		sum += avg[i]
	}
	var total float64
	for i := range MaxUpstreams {
		w := 0.0
		if live[i] {
			w = sum - avg[i]
			total += w
		}
		wt.w[i].Store(math.Float64bits(w))
	}
	wt.total.Store(math.Float64bits(total))
	mask := t.Candidates(0)
	var k int32
	var acc float64
	for m := mask; m != 0; m &= m - 1 {
		i := trailingZeros(m)
		if w := math.Float64frombits(wt.w[i].Load()); w > 0 {
			acc += w
			wt.sums[k].Store(math.Float64bits(acc))
			wt.at[k].Store(uint32(i))
			k++
		}
	}
	wt.mask.Store(mask)
	wt.n.Store(k)
	wt.gen.Store(gen)
}
