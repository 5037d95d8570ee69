package selector

import (
	"context"
	"fieldlink/selector/lstm"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Strategy picks one upstream of a [Table] for a delivery.
//
// Pick returns the index of an upstream that is up, not retired and not in
// skip, a mask of indexes not to pick (bit i set: the delivery already tried
// upstream i). It returns ok=false when there is none; it never returns a
// down upstream, so the uplink backs off and leaves packets in the buffer.
//
// Pick is safe for concurrent use, with itself and with every method of the
// Table. It does no I/O, does not block beyond a critical section of a few
// field updates, and does not allocate. Any randomness comes from the table
// (see Options.Seed) and any time from its clock, so a strategy is
// deterministic under test.
//
// A Strategy may keep state of its own (a round-robin position, smooth
// weights, Ribbon's weight table): use one Strategy value with one Table.
type Strategy interface {
	Pick(t *Table, skip uint64) (i int, ok bool)
	// Name is the strategy's config name, as [New] takes it.
	Name() string
}

// StrategyOptions tunes the strategies that have parameters. The zero value
// is the default; every field says what its zero value means and which
// strategy reads it.
type StrategyOptions struct {
	// DefaultRTT is p2c_ewma's cost for an upstream with no delivery ended
	// and no successful probe yet. Default 0, as in Finagle: such an upstream
	// wins against any measured one while it has nothing in flight, so a new
	// upstream gets tried at once. (Linkerd seeds 30 ms.)
	DefaultRTT time.Duration

	// WeightInterval is how often ribbon_wrt recomputes its weights. Default
	// 30 s, Ribbon's serverWeightTaskTimerInterval.
	WeightInterval time.Duration

	// DRF configures drf (uplink.drf in the site file; check it with
	// [DRFOptions.Validate] first). Nil: its defaults.
	DRF *DRFOptions

	// DRFCSWLC configures drf_cswlc's constants (the lab tunes them). Nil:
	// its defaults.
	DRFCSWLC *DRFCSWLCOptions

	// Outlier configures the outlier ejection of a name ending in
	// "+outlier" (see [New]). The zero value is Envoy's defaults.
	Outlier OutlierOptions
}

// Trained is a strategy with a model that its owner trains from its own
// history and keeps across restarts: irlb. The daemon finds it with a type
// assertion on the strategy [New] returned.
type Trained interface {
	Strategy
	// Train fits a new model on the history recorded so far and makes it
	// the model; it blocks for the whole fit and checks ctx as it goes.
	Train(ctx context.Context) error
	// Model returns the model in use, nil when there is none.
	Model() *lstm.Model
	// SetModel makes m, a trained model, the model (one loaded at start-up).
	SetModel(m *lstm.Model) error
}

// strategies maps config names to constructors; opt has its defaults filled.
var strategies = map[string]func(opt StrategyOptions) Strategy{
	"round_robin":          func(StrategyOptions) Strategy { return new(roundRobin) },
	"weighted_round_robin": func(StrategyOptions) Strategy { return new(smoothWeighted) },
	"random":               func(StrategyOptions) Strategy { return random{} },
	"least_conn":           func(StrategyOptions) Strategy { return leastConn{} },
	"p2c_ewma":             newP2CEWMA,
	"ribbon_wrt":           newRibbonWRT,
	// The source papers' strategies (see docs/algorithms.md and each file).
	"drf": func(opt StrategyOptions) Strategy {
		if opt.DRF != nil {
			return newDRF(*opt.DRF)
		}
		return newDRF(DRFOptions{})
	},
	"soa":        func(StrategyOptions) Strategy { return newSOA(soaOptions{}) },
	"load_aware": func(StrategyOptions) Strategy { return newLoadAware(loadAwareOptions{Fallback: leastConn{}}) },
	"cswlc":      func(StrategyOptions) Strategy { return newCSWLC(cswlcOptions{}) },
	"irlb":       func(StrategyOptions) Strategy { return newIRLB(irlbOptions{}) },
	// An anchor: Google's Prequal (docs/algorithms.md, Anchors).
	"prequal": func(StrategyOptions) Strategy { return newPrequal(prequalOptions{}) },
	// The gateway's own: the papers' structure with the anchors' lessons.
	"drf_cswlc": func(opt StrategyOptions) Strategy {
		if opt.DRFCSWLC != nil {
			return newDRFCSWLC(*opt.DRFCSWLC)
		}
		return newDRFCSWLC(DRFCSWLCOptions{})
	},
}

// New returns a fresh strategy by its config name (see [Names]), tuned by
// opt. A name followed by "+outlier" (not a config name: the lab's and the
// tests') puts the strategy behind Envoy's outlier ejection, tuned by
// opt.Outlier.
func New(name string, opt StrategyOptions) (Strategy, error) {
	if inner, ok := strings.CutSuffix(name, "+outlier"); ok {
		s, err := New(inner, opt)
		if err != nil {
			return nil, err
		}
		return withOutlier(s, opt.Outlier), nil
	}
	mk, ok := strategies[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (valid: %s)", ErrUnknownStrategy, name, strings.Join(Names(), ", "))
	}
	if opt.DefaultRTT < 0 {
		opt.DefaultRTT = 0
	}
	if opt.WeightInterval <= 0 {
		opt.WeightInterval = 30 * time.Second
	}
	return mk(opt), nil
}

// Names returns the config names of every strategy, sorted.
func Names() []string {
	names := make([]string, 0, len(strategies))
	for n := range strategies {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// nthBit returns the index of the k-th (from 0) set bit of m; m has more
// than k bits set.
func nthBit(m uint64, k int) int {
	for ; k > 0; k-- {
		m &= m - 1
	}
	return bits.TrailingZeros64(m)
}

// pickTie returns one index of the non-empty mask ties, uniformly.
func pickTie(t *Table, ties uint64) int {
	if ties&(ties-1) != 0 {
		return nthBit(ties, t.intN(bits.OnesCount64(ties)))
	}
	return trailingZeros(ties)
}

// atMostOne decides a pick with no candidate or one: done is false when
// cand has two or more, and the strategy must choose.
func atMostOne(cand uint64) (i int, ok, done bool) {
	switch {
	case cand == 0:
		return -1, false, true
	case cand&(cand-1) == 0:
		return trailingZeros(cand), true, true
	}
	return 0, false, false
}

// trailingZeros is the index of the lowest set bit of m.
func trailingZeros(m uint64) int { return bits.TrailingZeros64(m) }
