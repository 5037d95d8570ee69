package selector

import (
	"math"
	"sync/atomic"
	"time"
)

// soaStrategy is "soa": the weight of docs/algorithms.md § 001 (Chen, Ye, "a soaStrategy-based service
// management middleware for cloud platforms", Microcomputer Applications
// 32(7), 2016), where a monitor centre scores the
// providers, a registry pushes the weights and consumers call the best one
// directly.
//
// Four factors, in strictly decreasing priority:
//
//	WY' overload         1 − WY, WY = 1 when the upstream timed out within
//	                     SOAOptions.OverloadWindow (Stats.LastTimeout), else 0
//	WN  task count       1 / (1 + n), n = Stats.InFlight (reading)
//	WT  latest latency   1 − t / (t + t_ref) = t_ref / (t + t_ref), t = Stats.LastLatency,
//	                     t_ref = SOAOptions.LatencyRef (reading)
//	WH  history          1 − min(1, (m + σ) / T_exp)
//
// For WH, the last N latencies (the table's window, Options.Window), each
// clamped to [0, T_exp] (the paper's 0 < Δt < τ_exp; T_exp is
// SOAOptions.Timeout), are weighted N, N−1, …, 1 from the newest ("the
// latest call weighs most, the influence decreasing one by one"): m is their
// weighted mean and σ their weighted population standard deviation (the
// fluctuation). Reading: the paper's normalisation was lost; this one maps
// mean plus fluctuation onto [0, 1] by the timeout, as the paper divides by
// τ_exp.
//
// The paper folds them into W = WY' + 2·WY'·WN + WY'·WN·WT + WY'·WN·WT·WH
// (partly illegible in the paper; WY' = 1 when not overloaded is the reading), meaning W1 > W2
// whenever WY'1 > WY'2, ties falling to WN, then WT, then WH. That sum does
// not keep the order (WN = 1/2, WT ≈ 0 scores 2; WN = 1/3, WT ≈ WH ≈ 1
// scores 2.33), so the comparison is made lexicographically, which is the
// stated intent: (WY', WN, WT, WH), highest first. WN and WT are decreasing
// in n and t, so the order is that of (overloaded, in flight, latest
// latency, m + σ) ascending; exact ties are broken uniformly at random.
// With no delivery yet, t = 0 and WH = 1: a new upstream is tried first.
//
// Weights pushed by a registry ([soaStrategy.SetRegistryWeights], by upstream name,
// the paper's W from a monitor centre that sees every consumer) are used
// when present: when every candidate of a pick has one, the highest pushed
// weight wins and the local key above breaks ties; when any candidate has
// none, the local key decides for all (pushed and local weights are not on
// one scale, so they are not mixed). Pushed weights do not expire: as in
// the paper, the consumer keeps using what it has while the registry is
// down.
//
// WN is read live at every pick (one atomic per candidate). WY', WT and WH
// come from the monitor centre's cadence: they are recomputed every
// SOAOptions.Interval (1 s), when the table changes (see refresher) and
// after a registry push, by the first pick that finds the table's latest
// time reading past the due time. Pick does not read the clock, does not
// allocate and takes no lock.
type soaStrategy struct {
	window  int64   // OverloadWindow, ns
	tref    float64 // ns
	timeout float64 // ns

	reg atomic.Pointer[map[string]float64]
	ref refresher[soaKeys]
}

// soaOptions configures [newSOA]. The zero value is the default.
type soaOptions struct {
	// Interval is how often WY', WT and WH are recomputed. Default 1 s.
	Interval time.Duration
	// OverloadWindow is how recent a timeout makes an upstream overloaded
	// (WY = 1). Default 30 s.
	OverloadWindow time.Duration
	// LatencyRef is t_ref in WT = t_ref / (t + t_ref): the latency that
	// scores 0.5. It does not change the order, only the value of WT.
	// Default 100 ms.
	LatencyRef time.Duration
	// Timeout is T_exp, the delivery timeout that bounds and normalises the
	// history in WH. Default 10 s.
	Timeout time.Duration
}

// soaKeys is one computation of the cached factors.
type soaKeys struct {
	// key[i]: bit 62 overloaded, bits 0–7 the rank of (WT, WH) among the
	// upstreams (0 best, ties share a rank). A pick adds min(n, 2⁴⁸−1) << 8.
	key [MaxUpstreams]atomic.Uint64
	reg [MaxUpstreams]atomic.Uint64 // float64 bits of the pushed weight
	has atomic.Uint64               // bit i: upstream i has a pushed weight
}

const (
	soaOverBit  = 1 << 62
	soaMaxCount = 1<<48 - 1
)

// newSOA returns an soa strategy.
func newSOA(opt soaOptions) *soaStrategy {
	s := &soaStrategy{
		window:  int64(opt.OverloadWindow),
		tref:    float64(opt.LatencyRef),
		timeout: float64(opt.Timeout),
	}
	interval := int64(opt.Interval)
	if interval <= 0 {
		interval = int64(time.Second)
	}
	s.ref.init(interval, true)
	if s.window <= 0 {
		s.window = int64(30 * time.Second)
	}
	if s.tref <= 0 {
		s.tref = float64(100 * time.Millisecond)
	}
	if s.timeout <= 0 {
		s.timeout = float64(10 * time.Second)
	}
	return s
}

func (*soaStrategy) Name() string { return "soa" }

// SetRegistryWeights replaces the weights the registry pushed, by upstream
// name (higher is better); nil or empty clears them. NaN and infinite
// weights are ignored. The next pick uses them.
func (s *soaStrategy) SetRegistryWeights(w map[string]float64) {
	c := make(map[string]float64, len(w))
	for name, v := range w {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			c[name] = v
		}
	}
	s.reg.Store(&c)
	s.ref.expire()
}

func (s *soaStrategy) Pick(t *Table, skip uint64) (int, bool) {
	k := s.ref.get(t, t.lastSeen(), s)
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	useReg := cand&^k.has.Load() == 0
	var ties uint64
	bestKey, bestReg := uint64(math.MaxUint64), math.Inf(-1)
	for m := cand; m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		key := k.key[i].Load() | uint64(min(inflight(t.slots[i].state.Load()), soaMaxCount))<<8
		if useReg {
			r := math.Float64frombits(k.reg[i].Load())
			if r < bestReg || r == bestReg && key > bestKey {
				continue
			}
			if r > bestReg || key < bestKey {
				ties, bestKey, bestReg = 1<<i, key, r
				continue
			}
			ties |= 1 << i
			continue
		}
		switch {
		case key < bestKey:
			ties, bestKey = 1<<i, key
		case key == bestKey:
			ties |= 1 << i
		}
	}
	return pickTie(t, ties), true
}

// soaFactors are the four factors of one upstream, and what orders WH.
type soaFactors struct {
	WY, WN, WT, WH float64
	last           int64   // t, ns
	hist           float64 // m + σ, ns
}

// soaHistory returns the weighted mean and weighted population standard
// deviation of the latest n latencies of a ring whose next write goes to
// ring[next] (so that the oldest of the n is ring[(next−n) mod len]), with
// weights 1, 2, …, n from the oldest to the newest, each latency clamped to
// [0, timeout].
func soaHistory(ring []int64, next, n int, timeout float64) (mean, sd float64) {
	if n == 0 {
		return 0, 0
	}
	at := func(k int) float64 { // k-th oldest, clamped
		return min(max(float64(ring[(next-n+k+len(ring))%len(ring)]), 0), timeout)
	}
	var sw, sx float64
	for k := range n {
		w := float64(k + 1)
		sw += w
		sx += w * at(k)
	}
	mean = sx / sw
	var ss float64
	for k := range n {
		d := at(k) - mean
		ss += float64(k+1) * d * d
	}
	return mean, math.Sqrt(ss / sw)
}

// factors computes WY', WT and WH of upstream u at table time now, and WN
// for n in flight; u.mu is held.
func (s *soaStrategy) factors(t *Table, u *upstream, n int64, now int64) soaFactors {
	var f soaFactors
	f.WY = 1
	if !u.lastTimeout.IsZero() && int64(u.lastTimeout.Sub(t.epoch)) >= now-s.window {
		f.WY = 0
	}
	f.WN = 1 / (1 + float64(n))
	if u.count > 0 {
		f.last = u.last
	}
	f.WT = s.tref / (float64(f.last) + s.tref)
	m, sd := soaHistory(u.ring, u.ringNext, u.ringLen, s.timeout)
	f.hist = m + sd
	f.WH = 1 - min(1, f.hist/s.timeout)
	return f
}

// recompute computes the cached factors into k.
func (s *soaStrategy) recompute(t *Table, now int64, k *soaKeys) {
	var reg map[string]float64
	if p := s.reg.Load(); p != nil {
		reg = *p
	}
	n := t.Len()
	var fs [MaxUpstreams]soaFactors
	var over [MaxUpstreams]bool
	var regW [MaxUpstreams]float64
	var has uint64
	for i := range n {
		u := t.ups[i].Load()
		if u.retired.Load() {
			continue
		}
		u.mu.Lock()
		fs[i] = s.factors(t, u, 0, now)
		u.mu.Unlock()
		over[i] = fs[i].WY == 0
		if w, ok := reg[u.name]; ok {
			regW[i] = w
			has |= 1 << i
		}
	}
	for i := range MaxUpstreams {
		var key uint64
		if i < n {
			// rank = how many upstreams come strictly before i on (t, m + σ).
			for j := range n {
				if j != i && (fs[j].last < fs[i].last || fs[j].last == fs[i].last && fs[j].hist < fs[i].hist) {
					key++
				}
			}
			if over[i] {
				key |= soaOverBit
			}
		}
		k.key[i].Store(key)
		k.reg[i].Store(math.Float64bits(regW[i]))
	}
	k.has.Store(has)
}
