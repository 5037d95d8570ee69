package selector

import (
	"context"
	"fieldlink/selector/lstm"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// irlbOptions configures [newIRLB]. The zero value is the default; every
// field says what its zero value means.
type irlbOptions struct {
	// Perf is α1, β1, γ1 of P = α1·Cd + β1·Md + γ1·Bd (CPU speed, memory
	// size, bandwidth). Default {0.3, 0.3, 0.4}: the paper's "CPU and
	// memory equal, bandwidth slightly larger" (**reading** of its lost
	// table 2). Negative entries count as 0; the rest are scaled to sum 1;
	// all zero means the default.
	Perf [3]float64
	// Load is α2, β2, γ2 of L = α2·Cu + β2·Mu + γ2·Bu (utilisations).
	// Default {0.3, 0.3, 0.4}, scaled as Perf.
	Load [3]float64
	// Rank is α3, β3 of Rank = α3·q_t + β3·q_{t+1}. Default {0.5, 0.5}, the
	// paper's; scaled to sum 1.
	Rank [2]float64

	// LoadEpsilon and RankEpsilon keep W = P / ((L + εL)·(Rank + εR))
	// finite for an idle upstream. Defaults 0.01 (one percentage point of
	// utilisation) and 1 (one connection).
	LoadEpsilon, RankEpsilon float64

	// Period is how often, in table time, the weights are recomputed from
	// the latest reports, a new sample of each upstream's connection count
	// is recorded, and the model predicts. Default 1 s.
	Period time.Duration

	// History is how many samples of each upstream's connection count are
	// kept for [IRLB.Train]. Default 1024.
	History int

	// Model configures the LSTM that [IRLB.Train] fits; see [lstm.Options].
	Model lstm.Options
}

// irlbStrategy is "irlb": identifier-resolution load balancing, a weighted least
// connections whose weight uses a connection count predicted by an LSTM.
// Source: Zhang, Cai, Huo, Wang, Huang and Lu, irlbStrategy (docs/algorithms.md
// § 003). For each upstream S, from its reported [Load]:
//
//	P(S)    = α1·Cd + β1·Md + γ1·Bd           0.3, 0.3, 0.4
//	L(S)    = α2·Cu + β2·Mu + γ2·Bu           0.3, 0.3, 0.4
//	Rank(S) = α3·q_t + β3·q_{t+1}             0.5, 0.5
//	W(S)    = P / ((L + εL) · (Rank + εR))    εL = 0.01, εR = 1
//
// and a pick takes the candidate of the largest W (ties at random, from the
// table's stream). The paper's formula (14) is illegible in its only copy; W = P /
// (L · Rank) with small epsilons is the **reading** of "the weight rises
// with performance and falls with load and connections" (docs/algorithms.md
// § 003).
//
// Mapping onto Load: Cd = CPUMHz, Md = MemoryMB, Bd = BandwidthMbps, each
// normalised by the largest among the upstreams compared (a capacity that
// none reports, all 0, is 1 for all: equal); Cu = CPU, Mu = Memory,
// Bu = Network, clamped to [0, 1]. q_t is the upstream's reported
// Connections plus the deliveries this gateway has in flight to it, and
// q_{t+1} the LSTM's prediction of the next reported Connections plus the
// same in-flight count: the report is at most a Period old, and the
// in-flight count makes W fall as this gateway sends to S between reports,
// as a least-connections rule must (it double-counts the deliveries the
// report already saw, at most the in-flight count). So
// Rank + εR = α3·C + β3·Ĉ + εR + in_flight.
//
// The prediction: every Period, each upstream's Connections, when its
// report is new (a new At), is appended to its history (History samples,
// with the report's time), and the model, when there is one, predicts the
// next value from the last Window samples ([lstm.Model]: one LSTM layer and a
// dense output, Z-score inputs, Adam on MSE). Until a model is trained
// ([irlbStrategy.Train]) or loaded ([irlbStrategy.SetModel]), or while an upstream has
// fewer samples than the window, q_{t+1} = q_t: last-value prediction, and
// W is the paper's with the prediction term equal to the current count.
// A negative prediction counts as 0.
//
// Load: a report is fresh for Options.LoadTTL after its At. A pick with a
// candidate that has no fresh report falls back to least_conn over all the
// candidates (never a guess at its load: P is normalised across servers and
// is not defined with one missing), and counts one in [irlbStrategy.Fallbacks]. A
// report that comes after the last recomputation is used from the next one,
// at most a Period later. A pick with one candidate picks it, and is not a
// fallback.
//
// Cost and ownership: training never runs on the pick path. [irlbStrategy.Train]
// fits a new model on the recorded history and swaps it in; the caller owns
// the goroutine that calls it (e.g. every few minutes) and cancels it by
// ctx. The recomputation (one lock per upstream to copy its load, one
// model inference per upstream with a new report, about 8·H·(H+2)·Window
// floating-point operations plus 5·H·Window exponentials: some 30 µs at
// the defaults) runs on the pick that
// first finds the table's latest time reading past the due time, or the
// table changed, under TryLock (see refresher): other picks do not wait and
// use the weights published before. Pick itself reads atomics only, takes no lock
// and does not allocate.
type irlbStrategy struct {
	perf, load       [3]float64
	rank             [2]float64
	epsLoad, epsRank float64
	history          int
	modelOpt         lstm.Options

	ref refresher[irlbWeights]
	reportGate

	model atomic.Pointer[lstm.Model]
	dirty atomic.Bool // a new model: predict again for every upstream

	// The recomputation's own state, guarded by ref.mu (Train copies hist
	// under it too).
	hist [MaxUpstreams]irlbHistory
	pred *lstm.Predictor // over the model in use
}

// irlbWeights is what a recomputation publishes for picks.
type irlbWeights struct {
	a   [MaxUpstreams]atomic.Uint64 // float64 bits: P / (L + εL)
	b   [MaxUpstreams]atomic.Uint64 // float64 bits: α3·C + β3·Ĉ + εR
	exp expiries
}

// irlbHistory is one upstream's recorded connection counts.
type irlbHistory struct {
	u       *upstream // whose history: a reused index starts afresh
	lastAt  int64     // table time of the latest report recorded
	samples []lstm.Sample
	pred    float64 // Ĉ, the latest prediction
}

// newIRLB returns an irlb strategy, with no model: see [irlbStrategy.Train] and
// [irlbStrategy.SetModel].
func newIRLB(opt irlbOptions) *irlbStrategy {
	s := &irlbStrategy{
		perf:     irlbCoefficients(opt.Perf, [3]float64{0.3, 0.3, 0.4}),
		load:     irlbCoefficients(opt.Load, [3]float64{0.3, 0.3, 0.4}),
		epsLoad:  opt.LoadEpsilon,
		epsRank:  opt.RankEpsilon,
		history:  opt.History,
		modelOpt: opt.Model.WithDefaults(),
	}
	r := irlbCoefficients([3]float64{opt.Rank[0], opt.Rank[1], 0}, [3]float64{0.5, 0.5, 0})
	s.rank = [2]float64{r[0], r[1]}
	if s.epsLoad <= 0 {
		s.epsLoad = 0.01
	}
	if s.epsRank <= 0 {
		s.epsRank = 1
	}
	period := int64(opt.Period)
	if period <= 0 {
		period = int64(time.Second)
	}
	s.ref.init(period, true)
	for i := range s.ref.buf {
		s.ref.buf[i].exp.init()
	}
	if s.history <= 0 {
		s.history = 1024
	}
	s.history = max(s.history, s.modelOpt.Window+1)
	return s
}

// irlbCoefficients returns c scaled to sum 1, or def.
func irlbCoefficients(c, def [3]float64) [3]float64 {
	var sum float64
	for i := range c {
		c[i] = max(c[i], 0)
		sum += c[i]
	}
	if !(sum > 0) || math.IsInf(sum, 0) {
		return def
	}
	for i := range c {
		c[i] /= sum
	}
	return c
}

// Name is "irlb".
func (*irlbStrategy) Name() string { return "irlb" }

// Fallbacks is the number of picks that fell back to least_conn because a
// candidate had no fresh load report.
func (s *irlbStrategy) Fallbacks() uint64 { return s.fallbacks.Load() }

// Model returns the model in use, nil when there is none. It is for
// MarshalBinary; do not Fit or UnmarshalBinary it.
func (s *irlbStrategy) Model() *lstm.Model { return s.model.Load() }

// SetModel makes m the model, from the next recomputation (e.g. one loaded
// with [lstm.Model.UnmarshalBinary] at start-up); nil goes back to last-value
// prediction. m must be trained and is not to be changed afterwards.
func (s *irlbStrategy) SetModel(m *lstm.Model) error {
	if m != nil && !m.Trained() {
		return fmt.Errorf("%w: irlb: the model is not trained", lstm.ErrBadModel)
	}
	s.model.Store(m)
	s.dirty.Store(true)
	return nil
}

// Train fits a new model (irlbOptions.Model) on the connection counts
// recorded so far, one series per upstream, and makes it the model from the
// next recomputation. It blocks for the whole fit, checking ctx between
// minibatches, and returns [lstm.ErrNotEnoughData] (wrapped) while no
// upstream has Window + 1 samples. Picks go on meanwhile with the previous
// model. Call it from a goroutine you own; concurrent calls are safe, and
// the last to finish wins.
func (s *irlbStrategy) Train(ctx context.Context) error {
	var series [][]lstm.Sample
	s.ref.mu.Lock()
	for i := range s.hist {
		if samples := s.hist[i].samples; len(samples) > 0 {
			series = append(series, slices.Clone(samples))
		}
	}
	s.ref.mu.Unlock()
	m := lstm.New(s.modelOpt)
	if _, err := m.Fit(ctx, series...); err != nil {
		return fmt.Errorf("selector: irlb: train: %w", err)
	}
	s.model.Store(m)
	s.dirty.Store(true)
	return nil
}

// Pick picks as the type's doc describes.
func (s *irlbStrategy) Pick(t *Table, skip uint64) (int, bool) {
	cand := t.Candidates(skip)
	if i, ok, done := atMostOne(cand); done {
		return i, ok
	}
	now := t.lastSeen()
	p := s.ref.get(t, now, s)
	if !p.exp.fresh(cand, now) {
		return s.fallBack(t, skip)
	}
	var ties uint64
	best := -1.0
	for m := cand; m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		a, b := math.Float64frombits(p.a[i].Load()), math.Float64frombits(p.b[i].Load())
		w := a / (b + float64(inflight(t.slots[i].state.Load())))
		if w > best {
			best, ties = w, 1<<i
		} else if w == best {
			ties |= 1 << i
		}
	}
	if ties == 0 { // every W NaN: cannot happen with finite reports
		return leastConn{}.Pick(t, skip)
	}
	return pickTie(t, ties), true
}

// recompute records new samples, predicts, and computes the weights into
// p, carrying over those of the upstreams without a fresh report.
func (s *irlbStrategy) recompute(t *Table, now int64, p *irlbWeights) {
	live := t.live.Load()
	model := s.model.Load()
	if model != nil && (s.pred == nil || s.pred.Model() != model) {
		s.pred = model.Predictor()
	}
	again := s.dirty.Swap(false)
	n := t.Len()
	var loads [MaxUpstreams]Load
	var fresh uint64
	for i := range n {
		u := t.ups[i].Load()
		hs := &s.hist[i]
		if hs.u != u {
			*hs = irlbHistory{u: u, lastAt: math.MinInt64, samples: hs.samples[:0]}
		}
		l, exp, ok := cswlcFreshLoad(t, u, now)
		p.exp[i].Store(exp)
		if !ok {
			continue
		}
		if live&(1<<i) != 0 {
			loads[i], fresh = l, fresh|1<<i
		}
		at := int64(l.At.Sub(t.epoch))
		added := at != hs.lastAt
		if added {
			hs.add(lstm.Sample{T: float64(at) / 1e9, Q: float64(l.Connections)}, s.history)
			hs.lastAt = at
		}
		if added || again {
			hs.pred = float64(l.Connections)
			if model != nil && len(hs.samples) >= model.Window() {
				hs.pred = max(s.pred.Predict(hs.samples), 0)
			}
		}
	}
	var a, b [MaxUpstreams]float64
	irlbWeigh(s, &loads, fresh, &a, &b)
	prev := s.ref.published()
	for i := range MaxUpstreams {
		if fresh&(1<<i) == 0 {
			p.a[i].Store(prev.a[i].Load())
			p.b[i].Store(prev.b[i].Load())
			continue
		}
		p.a[i].Store(math.Float64bits(a[i]))
		p.b[i].Store(math.Float64bits(b[i]))
	}
}

// add appends p, keeping at most n samples (and at most 2n in memory).
func (hs *irlbHistory) add(p lstm.Sample, n int) {
	if hs.samples == nil {
		hs.samples = make([]lstm.Sample, 0, 2*n)
	}
	if len(hs.samples) == cap(hs.samples) {
		k := copy(hs.samples, hs.samples[len(hs.samples)-n+1:])
		hs.samples = hs.samples[:k]
	}
	hs.samples = append(hs.samples, p)
}

// irlbWeigh computes, for every upstream in mask, a = P / (L + εL) and
// b = α3·C + β3·Ĉ + εR, so that W = a / (b + in_flight).
func irlbWeigh(s *irlbStrategy, loads *[MaxUpstreams]Load, mask uint64, a, b *[MaxUpstreams]float64) {
	var maxC, maxM, maxB float64
	for m := mask; m != 0; m &= m - 1 {
		l := &loads[trailingZeros(m)]
		maxC, maxM, maxB = max(maxC, l.CPUMHz), max(maxM, l.MemoryMB), max(maxB, l.BandwidthMbps)
	}
	norm := func(x, top float64) float64 {
		if !(top > 0) {
			return 1
		}
		return max(x, 0) / top
	}
	use := func(u float64) float64 { return min(max(u, 0), 1) }
	for m := mask; m != 0; m &= m - 1 {
		i := trailingZeros(m)
		l := &loads[i]
		p := s.perf[0]*norm(l.CPUMHz, maxC) + s.perf[1]*norm(l.MemoryMB, maxM) + s.perf[2]*norm(l.BandwidthMbps, maxB)
		ld := s.load[0]*use(l.CPU) + s.load[1]*use(l.Memory) + s.load[2]*use(l.Network)
		a[i] = p / (ld + s.epsLoad)
		b[i] = s.rank[0]*float64(max(l.Connections, 0)) + s.rank[1]*s.hist[i].pred + s.epsRank
	}
}
