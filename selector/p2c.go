package selector

import (
	"math"
	"math/bits"
)

// p2cPenalty is Finagle's load for an upstream with deliveries in flight and
// no cost at all (PeakEwma.scala: Long.MaxValue >> 16 ns, about 39 hours):
// one that has not answered yet is not flooded for looking free.
const p2cPenalty = float64(math.MaxInt64 >> 16)

// p2cEWMA is "p2c_ewma": power of two choices over peak-EWMA latency, as
// Finagle's P2CPeakEwma (p2c/P2CPick.scala, PeakEwma.scala) and linkerd's
// balancer (tower's balance::p2c over load::PeakEwma). Two distinct
// candidates are drawn uniformly at random and the one with the lower load
// wins; the first drawn wins a tie. With one candidate, it is picked.
//
//	load = cost × (in_flight + 1)
//
// cost is the upstream's PeakEWMA: each delivery's latency resets it when
// slower than the current estimate and otherwise enters as
// cost = cost·w + rtt·(1−w), w = e^(−Δt/τ), τ = Options.Decay (10 s); a
// failed delivery enters as at least Options.FailurePenalty (5 s, linkerd's
// load biaser), so that fast failures do not look fast. Between deliveries
// the estimate decays toward 0 as cost·e^(−Δt/τ), so an idle upstream gets
// tried again.
//
// Finagle and tower decay by recording a 0 sample at every read of the
// load, which makes the weight of the next real sample depend on how often
// the balancer happened to look. Here Pick reads the decayed cost without
// writing it back (it takes no lock), and Δt runs from the previous
// delivery's end. Both costs decay by the same factor up to the present, so
// comparing two measured upstreams needs no clock: Pick compares
// ln(cost) + stamp/τ + ln(in_flight + 1), which orders the loads exactly as
// the loads at any common instant.
//
// An upstream with no delivery ended yet costs its probe round-trip when a
// probe has succeeded, else StrategyOptions.DefaultRTT (0). As in Finagle, a
// cost of 0 with deliveries in flight is a load of Long.MaxValue >> 16 ns.
// These comparisons read the clock. Weights are not used, as in Finagle's
// and tower's p2c.
type p2cEWMA struct {
	defaultRTT float64
}

func newP2CEWMA(opt StrategyOptions) Strategy {
	return &p2cEWMA{defaultRTT: float64(opt.DefaultRTT)}
}

func (*p2cEWMA) Name() string { return "p2c_ewma" }

func (s *p2cEWMA) Pick(t *Table, skip uint64) (int, bool) {
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	n := bits.OnesCount64(cand)
	if n == 1 {
		return trailingZeros(cand), true
	}
	// Two distinct indexes from one draw: the low half picks among n, the
	// high half among the n−1 others.
	r := t.rand64()
	ka := int((r & 0xffffffff) * uint64(n) >> 32)
	kb := int((r >> 32) * uint64(n-1) >> 32)
	if kb >= ka {
		kb++
	}
	a, b := nthBit(cand, ka), nthBit(cand, kb)
	ua, ub := t.ups[a].Load(), t.ups[b].Load()
	pa, pb := inflight(t.slots[a].state.Load()), inflight(t.slots[b].state.Load())
	la, lb := ua.peakLog.Load(), ub.peakLog.Load()
	if la != noCost && lb != noCost {
		fa, fb := math.Float64frombits(la), math.Float64frombits(lb)
		if (pa == 0 || !math.IsInf(fa, -1)) && (pb == 0 || !math.IsInf(fb, -1)) {
			if fb+ln1p(pb) < fa+ln1p(pa) {
				return b, true
			}
			return a, true
		}
	}
	now := t.clock()
	if s.load(t, ub, pb, now) < s.load(t, ua, pa, now) {
		return b, true
	}
	return a, true
}

// load is the load of upstream u with pending deliveries in flight at table
// time now.
func (s *p2cEWMA) load(t *Table, u *upstream, pending int64, now int64) float64 {
	cost, ok := u.peakAt(now, t.tau)
	if !ok {
		cost = s.defaultRTT
		if rtt := u.probeRTT.Load(); rtt > 0 {
			cost = float64(rtt)
		}
	}
	if cost == 0 && pending > 0 {
		return p2cPenalty
	}
	return cost * float64(pending+1)
}

// ln1p returns ln(n + 1) for n ≥ 0, from a table for small n.
func ln1p(n int64) float64 {
	if n < int64(len(ln1pTable)) {
		return ln1pTable[n]
	}
	return math.Log(float64(n) + 1)
}

var ln1pTable = func() (t [64]float64) {
	for n := range t {
		t[n] = math.Log(float64(n) + 1)
	}
	return t
}()
