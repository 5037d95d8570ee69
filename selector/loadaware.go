package selector

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// loadAware is "load_aware": the load-aware replica choice of docs/algorithms.md § 004
// (HDFS reads of PDM files). Each upstream reports its
// own load ([Table.Report]); its load is
//
//	U = λ1·U(Disk) + λ2·U(CPU) + λ3·U(Net),  λ1 + λ2 + λ3 = 1
//
// with U(Disk) = Load.DiskIO, U(CPU) = Load.CPU and U(Net) = Load.Network
// (utilisations, 0..1). The paper gives no λ; the reading here is 1/3 each
// (LoadAwareOptions.Lambda; weights that do not sum to 1 are scaled so that
// they do). For a pick, every candidate whose U is above the average U of
// the candidates is dropped, and one of the rest (never empty: the least
// loaded is at most the average) is picked uniformly at random (the paper's
// step 7 says only "pick one"; random keeps identical gateways apart).
//
// A gateway cannot observe server load, only be told it, so when any
// candidate has no fresh report (none came, or the latest is older than
// the table's Options.LoadTTL), the strategy does not guess: the whole pick
// goes to the fallback strategy (LoadAwareOptions.Fallback, least_conn by
// default) and is counted in [loadAware.Fallbacks]. So does a pick whose
// loads do not average to a finite number (a NaN in a report).
//
// Reports are read from the table every LoadAwareOptions.Interval (1 s)
// and when the table changes (see refresher), by the first pick that finds the
// table's latest time reading past the due time: a new report is seen at
// most Interval late. Freshness is judged at every pick against that
// latest time reading (Begin, End, Probe, Report or Snapshot, to the
// millisecond). Pick does not read the clock, does not allocate and takes
// no lock.
type loadAware struct {
	lambda   [3]float64 // disk, CPU, network
	fallback Strategy

	fallbacks atomic.Uint64

	ref refresher[loadAwareSnap]
}

// loadAwareOptions configures [newLoadAware]. The zero value is the default.
type loadAwareOptions struct {
	// Lambda weighs disk IO, CPU and network utilisation, in that order
	// (λ1, λ2, λ3). Default 1/3 each. Negative and non-finite weights count
	// as 0; the weights are scaled to sum to 1.
	Lambda [3]float64
	// Interval is how often the reports are read from the table. Default 1 s.
	Interval time.Duration
	// Fallback picks when a candidate has no fresh load report. Default
	// least_conn. Give it a fresh strategy of its own.
	Fallback Strategy
}

// loadAwareSnap is one reading of the reports.
type loadAwareSnap struct {
	has    atomic.Uint64               // bit i: upstream i had a report
	u      [MaxUpstreams]atomic.Uint64 // float64 bits of U
	expiry [MaxUpstreams]atomic.Int64  // table time after which the report is stale
}

// newLoadAware returns a load_aware strategy.
func newLoadAware(opt loadAwareOptions) *loadAware {
	s := &loadAware{fallback: opt.Fallback}
	interval := int64(opt.Interval)
	if interval <= 0 {
		interval = int64(time.Second)
	}
	s.ref.init(interval, true)
	if s.fallback == nil {
		s.fallback = leastConn{}
	}
	var sum float64
	for k, l := range opt.Lambda {
		if l > 0 && !math.IsInf(l, 0) {
			s.lambda[k] = l
			sum += l
		}
	}
	if sum == 0 {
		s.lambda, sum = [3]float64{1, 1, 1}, 3
	}
	for k := range s.lambda {
		s.lambda[k] /= sum
	}
	return s
}

func (*loadAware) Name() string { return "load_aware" }

// Fallbacks is how many picks went to the fallback strategy because a
// candidate had no fresh load report.
func (s *loadAware) Fallbacks() uint64 { return s.fallbacks.Load() }

// load is U for one report.
func (s *loadAware) load(l *Load) float64 {
	return s.lambda[0]*l.DiskIO + s.lambda[1]*l.CPU + s.lambda[2]*l.Network
}

func (s *loadAware) Pick(t *Table, skip uint64) (int, bool) {
	now := t.lastSeen()
	sn := s.ref.get(t, now, s)
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	if cand&^sn.has.Load() != 0 {
		return s.fallBack(t, skip)
	}
	var sum float64
	var m int
	for b := cand; b != 0; b &= b - 1 {
		i := trailingZeros(b) & (MaxUpstreams - 1)
		if now > sn.expiry[i].Load() {
			return s.fallBack(t, skip)
		}
		sum += math.Float64frombits(sn.u[i].Load())
		m++
	}
	avg := sum / float64(m)
	if math.IsNaN(avg) || math.IsInf(avg, 0) {
		return s.fallBack(t, skip) // a report that is no number is none
	}
	var rest uint64
	low, lowI := math.Inf(1), trailingZeros(cand)
	for b := cand; b != 0; b &= b - 1 {
		i := trailingZeros(b) & (MaxUpstreams - 1)
		u := math.Float64frombits(sn.u[i].Load())
		if u <= avg {
			rest |= 1 << i
		}
		if u < low {
			low, lowI = u, i
		}
	}
	if rest == 0 { // the average rounded below the least load
		return lowI, true
	}
	return nthBit(rest, t.intN(bits.OnesCount64(rest))), true
}

func (s *loadAware) fallBack(t *Table, skip uint64) (int, bool) {
	s.fallbacks.Add(1)
	return s.fallback.Pick(t, skip)
}

// recompute reads every upstream's latest report into sn.
func (s *loadAware) recompute(t *Table, _ int64, sn *loadAwareSnap) {
	var has uint64
	n := t.Len()
	for i := range n {
		u := t.ups[i].Load()
		if u.retired.Load() {
			continue
		}
		u.mu.Lock()
		if u.hasLoad {
			has |= 1 << i
			sn.u[i].Store(math.Float64bits(s.load(&u.load)))
			sn.expiry[i].Store(int64(u.load.At.Sub(t.epoch)) + int64(t.loadTTL))
		}
		u.mu.Unlock()
	}
	sn.has.Store(has)
}
