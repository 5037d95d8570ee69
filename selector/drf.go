package selector

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"
)

// drfStrategy is "drf": the improved dominant-resource-fairness rule of docs/algorithms.md § 000
// (Ma, Wu, Xia et al., "improved drfStrategy load balancing for smart-agriculture
// microservices", Jiangsu J. of Agr. Sci. 2020), a
// client-side Ribbon rule.
//
// At every re-scoring, each live upstream j (up, not retired) gets the five
// factors of the paper, all "lower is better", read from the table as
// [Stats] shows them:
//
//	x_j1 FailureCount                      Stats.FailuresLastSecond (Ribbon's current 1 s bucket)
//	x_j2 ActiveRequestsCount               Stats.InFlight
//	x_j3 SuccessiveConnectionFailureCount  Stats.ConsecutiveFailures
//	x_j4 ResponseTimeStdDev                Stats.LifetimeStdDev (default, as Ribbon) or Stats.LatencyStdDev
//	x_j5 Latency (probe thread)            Stats.ProbeRTT
//
// Ribbon counts only connection errors in SuccessiveConnectionFailureCount;
// the table counts every failed delivery (a refused publish too), which is
// what the gateway can tell. ResponseTimeStdDev is lifetime, as Ribbon's
// ServerStats keeps it (it never forgets), unless
// DRFOptions.ResponseTime is [DRFWindowed]: then it is over the table's
// last Options.Window latencies.
//
// Each factor is normalised across the live upstreams by Z-score,
//
//	z_jf = (x_jf − μ_f) / σ_f      (population σ; z_jf = 0 for all j when σ_f = 0)
//
// An upstream with no successful probe yet has z_j5 = 0 (the mean: no
// guess either way), and μ_5, σ_5 are over the upstreams that have one.
//
// The Delphi step gives TR (resource amount per factor, summed over the
// servers) and N (the demand of the gateway's task per factor), see
// package selector/delphi. The share of the task on factor f is N_f / TR_f; the dominant
// factor d is the argmax (the first on a tie). The weight set is A_f = 1,
// A_d = DRFOptions.DominantWeight (12, the paper's), and the score is
//
//	score_j = Σ_f A_f · z_jf
//
// Upstreams are sorted by ascending score. Of the m candidates of a pick,
// in that order, the best ⌈m/2⌉ = k are kept (the paper's 50%; reading:
// rounded up, so one candidate is kept of one, three of five) and the r-th
// of them (from 0) is picked with probability (k − r) / (k(k+1)/2): weights
// k, k−1, …, 1, "arithmetically decreasing". Reading for equal scores,
// which the paper does not consider: an upstream's rank is the number of
// candidates with a strictly lower score, r, and it is kept with weight
// k − r while r < k; so upstreams that score alike share alike (every
// upstream scores 0 before any statistics come, and is picked uniformly),
// and a tie at the cut keeps the whole tie. When nothing is skipped and
// every upstream scored is still up, the candidates are those scored and,
// without ties, this is the paper's rule exactly; on a retry the order is
// the same and the best half of what is left is kept.
//
// Without TR and N (all zero) no factor dominates and every weight is 1.
//
// Re-scoring: the paper re-runs from the probing step every 5 min
// (DRFOptions.Period), and whenever the server list changes; here whenever
// the table changes (an upstream added, retired, up, down or reweighted).
// It is done by the first pick that finds the table's latest time reading
// (Begin, End, Probe, Report or Snapshot, to the millisecond) past the due
// time, under a TryLock, into the buffer not being read (see refresher); Pick itself does not read the
// clock and does not allocate. Between re-scorings the order is stale, by
// design of the paper: in-flight counts and failures of the last second
// are those of the re-scoring instant.
type drfStrategy struct {
	w      [drfFactors]float64 // A_f
	period int64
	lt     bool // lifetime response-time σ

	ref refresher[drfOrder]
}

// DRFResponseTime says which response-time statistics the drf strategy's
// ResponseTimeStdDev factor reads.
type DRFResponseTime uint8

const (
	// DRFLifetime is the standard deviation of every latency ever recorded
	// ([Stats].LifetimeStdDev), as Ribbon's ServerStats keeps it. The
	// default.
	DRFLifetime DRFResponseTime = iota
	// DRFWindowed is the standard deviation of the last Options.Window
	// latencies ([Stats].LatencyStdDev).
	DRFWindowed
)

// String is the config spelling: "lifetime" or "window".
func (r DRFResponseTime) String() string {
	if r == DRFWindowed {
		return "window"
	}
	return "lifetime"
}

// DRFFactors is one value per factor of the drf strategy, in its order. In
// DRFOptions they are Delphi amounts: counts for the first three,
// milliseconds for the last two.
type DRFFactors struct {
	Failures            float64 // FailureCount, in the last second
	InFlight            float64 // ActiveRequestsCount
	ConsecutiveFailures float64 // SuccessiveConnectionFailureCount
	ResponseTimeStdDev  float64 // ResponseTimeStdDev, ms
	Latency             float64 // probe latency, ms
}

// drfFactors is the number of factors.
const drfFactors = 5

// drfFactorNames are the config spellings of the factors, in order.
var drfFactorNames = [drfFactors]string{"failures", "in_flight", "consecutive_failures", "rt_stddev", "latency"}

// DRFFactorNames returns the site file's names of the factors (the keys of
// uplink.drf.tr and uplink.drf.n), in the order of [DRFFactors.At].
func DRFFactorNames() []string { return slices.Clone(drfFactorNames[:]) }

// At returns factor k (0 ≤ k < 5, in the order of [DRFFactorNames]).
func (f DRFFactors) At(k int) float64 { return f.vec()[k] }

// Set sets factor k (0 ≤ k < 5, in the order of [DRFFactorNames]) to v.
func (f *DRFFactors) Set(k int, v float64) {
	a := f.vec()
	a[k] = v
	*f = drfFactorsOf(a)
}

func (f DRFFactors) vec() [drfFactors]float64 {
	return [drfFactors]float64{f.Failures, f.InFlight, f.ConsecutiveFailures, f.ResponseTimeStdDev, f.Latency}
}

func drfFactorsOf(v [drfFactors]float64) DRFFactors {
	return DRFFactors{Failures: v[0], InFlight: v[1], ConsecutiveFailures: v[2], ResponseTimeStdDev: v[3], Latency: v[4]}
}

// DRFOptions configures drf ([StrategyOptions].DRF). The zero value is the default.
type DRFOptions struct {
	// TR is the resource amount per factor (the servers' total) and N the
	// demand of the gateway's task per factor, from the Delphi step
	// (package selector/delphi). The dominant factor is the argmax of N_f / TR_f. All zero
	// (the default): no dominant factor, every factor weighs 1.
	TR, N DRFFactors

	// DominantWeight multiplies the dominant factor's z-scores. Default 12,
	// the paper's.
	DominantWeight float64

	// Period is how often the upstreams are re-scored. Default 5 min, the
	// paper's.
	Period time.Duration

	// ResponseTime selects lifetime (default) or windowed response-time
	// statistics for the ResponseTimeStdDev factor.
	ResponseTime DRFResponseTime
}

// Validate reports an option the strategy cannot use: a negative, NaN or
// infinite amount, a demand on a factor of no resource, or a dominant
// weight below 1.
func (o DRFOptions) Validate() error {
	tr, n := o.TR.vec(), o.N.vec()
	for f := range drfFactors {
		for _, v := range [2]struct {
			what string
			x    float64
		}{{"tr", tr[f]}, {"n", n[f]}} {
			if v.x < 0 || math.IsNaN(v.x) || math.IsInf(v.x, 0) {
				return fmt.Errorf("selector: drf: %s.%s must be a finite number ≥ 0, got %v", v.what, drfFactorNames[f], v.x)
			}
		}
		if n[f] > 0 && tr[f] == 0 {
			return fmt.Errorf("selector: drf: n.%s is %v but tr.%s is 0: a demand needs a resource amount", drfFactorNames[f], n[f], drfFactorNames[f])
		}
	}
	if o.DominantWeight != 0 && !(o.DominantWeight >= 1) || math.IsInf(o.DominantWeight, 0) {
		return fmt.Errorf("selector: drf: dominant_weight must be ≥ 1, got %v", o.DominantWeight)
	}
	if o.Period < 0 {
		return fmt.Errorf("selector: drf: period must not be negative, got %v", o.Period)
	}
	if o.ResponseTime > DRFWindowed {
		return fmt.Errorf("selector: drf: unknown response-time statistics %d", o.ResponseTime)
	}
	return nil
}

// drfOrder is one scoring: the live upstreams by ascending score.
type drfOrder struct {
	n     atomic.Int32
	order [MaxUpstreams]atomic.Uint32 // order[r] is the index of rank r
	score [MaxUpstreams]atomic.Uint64 // float64 bits of its score
}

// newDRF returns a drf strategy. Options that [DRFOptions.Validate] rejects
// are taken as their defaults (an invalid amount as 0).
func newDRF(opt DRFOptions) *drfStrategy {
	s := &drfStrategy{period: int64(opt.Period), lt: opt.ResponseTime != DRFWindowed}
	if s.period <= 0 {
		s.period = int64(5 * time.Minute)
	}
	aw := opt.DominantWeight
	if !(aw >= 1) || math.IsInf(aw, 0) {
		aw = 12
	}
	d := drfDominant(opt.TR.vec(), opt.N.vec())
	for f := range s.w {
		s.w[f] = 1
	}
	if d >= 0 {
		s.w[d] = aw
	}
	s.ref.init(s.period, true)
	return s
}

func (*drfStrategy) Name() string { return "drf" }

// Weights returns the weight set A: 1 per factor, DominantWeight on the
// dominant one.
func (s *drfStrategy) Weights() DRFFactors { return drfFactorsOf(s.w) }

// drfDominant returns the index of the dominant factor, argmax N_f / TR_f
// over the factors with TR_f > 0 and N_f > 0 (the first on a tie), or −1
// when there is none. Negative or non-finite amounts count as 0.
func drfDominant(tr, n [drfFactors]float64) int {
	best, bestShare := -1, 0.0
	for f := range drfFactors {
		if !(tr[f] > 0) || !(n[f] > 0) || math.IsInf(tr[f], 0) || math.IsInf(n[f], 0) {
			continue
		}
		if share := n[f] / tr[f]; share > bestShare {
			best, bestShare = f, share
		}
	}
	return best
}

// drfZ sets z[j] to the Z-score of x[j] among the j with has[j], and 0 for
// the others; σ is the population standard deviation, and every z is 0 when
// it is 0.
func drfZ(x []float64, has []bool, z []float64) {
	var sum float64
	var n int
	for j := range x {
		if has[j] {
			sum += x[j]
			n++
		}
	}
	for j := range z {
		z[j] = 0
	}
	if n == 0 {
		return
	}
	mean := sum / float64(n)
	var ss float64
	for j := range x {
		if has[j] {
			d := x[j] - mean
			ss += d * d
		}
	}
	sd := math.Sqrt(ss / float64(n))
	if sd == 0 || math.IsNaN(sd) {
		return
	}
	for j := range x {
		if has[j] {
			z[j] = (x[j] - mean) / sd
		}
	}
}

// drfScore computes score_j = Σ_f w_f · z_jf for the k upstreams whose
// factors are x[:k] (has[j][f]: factor f of j is known).
func drfScore(x *[MaxUpstreams][drfFactors]float64, has *[MaxUpstreams][drfFactors]bool, k int, w [drfFactors]float64, score *[MaxUpstreams]float64) {
	var col, z [MaxUpstreams]float64
	var hc [MaxUpstreams]bool
	for j := range k {
		score[j] = 0
	}
	for f := range drfFactors {
		for j := range k {
			col[j], hc[j] = x[j][f], has[j][f]
		}
		drfZ(col[:k], hc[:k], z[:k])
		for j := range k {
			score[j] += w[f] * z[j]
		}
	}
}

func (s *drfStrategy) Pick(t *Table, skip uint64) (int, bool) {
	o := s.ref.get(t, t.lastSeen(), s)
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	// The candidates in score order.
	var at [MaxUpstreams]int
	var sc [MaxUpstreams]uint64
	m := 0
	for r := range min(int(o.n.Load()), MaxUpstreams) {
		i := int(o.order[r].Load() & (MaxUpstreams - 1))
		if cand&(1<<i) != 0 {
			at[m], sc[m] = i, o.score[r].Load()
			m++
		}
	}
	if m == 0 {
		// Only upstreams that came up after the scoring (a concurrent
		// SetUp): uniform until the next pick re-scores.
		return nthBit(cand, t.intN(bits.OnesCount64(cand))), true
	}
	return at[drfDraw(t, sc[:m], (m+1)/2)], true
}

// drfDraw draws a position in scores (ascending) with weight k − b, b the
// number of scores strictly below it, among the positions with b < k: k,
// k−1, …, 1 when no two scores are equal.
func drfDraw(t *Table, scores []uint64, k int) int {
	var wt [MaxUpstreams]int
	total, better, m := 0, 0, len(scores)
	for p := range scores {
		if p > 0 && scores[p] != scores[p-1] {
			better = p
		}
		if better >= k {
			m = p
			break
		}
		wt[p] = k - better
		total += wt[p]
	}
	x := drfIntN(t, total)
	for p := range m {
		if x -= wt[p]; x < 0 {
			return p
		}
	}
	return 0
}

// drfIntN returns a uniform int in [0, n) for n > 0, from the table's
// stream; the bias is below n·2⁻⁶⁴.
func drfIntN(t *Table, n int) int {
	hi, _ := bits.Mul64(t.rand64(), uint64(n))
	return int(hi)
}

// recompute scores the live upstreams into o, in order.
func (s *drfStrategy) recompute(t *Table, now int64, o *drfOrder) {
	live := t.live.Load()
	var idx [MaxUpstreams]int
	var x [MaxUpstreams][drfFactors]float64
	var has [MaxUpstreams][drfFactors]bool
	k := 0
	for m := live; m != 0; m &= m - 1 {
		i := trailingZeros(m)
		if i >= t.Len() {
			break
		}
		idx[k] = i
		x[k], has[k] = s.factors(t, i, now)
		k++
	}
	var score [MaxUpstreams]float64
	drfScore(&x, &has, k, s.w, &score)
	// Insertion sort by (score, index): k ≤ 64, no allocation.
	var ord [MaxUpstreams]int
	for j := range k {
		ord[j] = j
		for p := j; p > 0 && score[ord[p]] < score[ord[p-1]]; p-- {
			ord[p], ord[p-1] = ord[p-1], ord[p]
		}
	}
	for r := range k {
		o.order[r].Store(uint32(idx[ord[r]]))
		o.score[r].Store(math.Float64bits(score[ord[r]] + 0)) // + 0: −0 is 0
	}
	o.n.Store(int32(k))
}

// factors reads the five factors of upstream i at table time now.
func (s *drfStrategy) factors(t *Table, i int, now int64) (x [drfFactors]float64, has [drfFactors]bool) {
	u := t.ups[i].Load()
	if st := t.slots[i].state.Load(); st>>genShift == u.gen {
		x[1] = float64(inflight(st))
	}
	x[2] = float64(u.consecutive.Load())
	u.mu.Lock()
	if now < u.failBucketEnd {
		x[0] = float64(u.failBucket)
	}
	var sd float64
	if s.lt {
		_, sd = u.lifetime()
	} else {
		_, sd = u.windowStats()
	}
	u.mu.Unlock()
	x[3] = sd / 1e6
	has = [drfFactors]bool{true, true, true, true, false}
	if rtt := u.probeRTT.Load(); rtt > 0 {
		x[4], has[4] = float64(rtt)/1e6, true
	}
	return x, has
}
