package lab

import (
	"context"
	"fmt"
	"io"
	"math"

	"fieldlink/selector"
)

// TuneConfig configures [Tune]. The zero value is the shipped tuning run.
type TuneConfig struct {
	// Train and Held are the scenarios the search fits on and the ones it
	// is checked on; defaults TuneTrain and TuneHeld.
	Train, Held []string
	// Seeds per scenario (default 2): the search runs seeds 1…Seeds, the
	// check seeds Seeds+1…2·Seeds, so neither scenarios nor seeds of the
	// check were seen by the search.
	Seeds int
	// Nests and Generations size the cuckoo search (defaults 8 and 6: 96
	// evaluations).
	Nests, Generations int
	// Baselines are what drf_cswlc is scored against, scenario by scenario:
	// the best of them is the reference. Default TuneBaselines.
	Baselines []string
	// Progress gets a line per evaluation.
	Progress io.Writer
	// Seed fixes the search.
	Seed uint64
}

// The shipped tuning run: training and held-out scenarios of every kind
// (capacity, a slow node, outages, a spike, fleets, a join, placement).
var (
	TuneTrain     = []string{"S1", "S2", "S4c", "S5", "S6b", "S7", "S9", "S11"}
	TuneHeld      = []string{"S3a", "S4a", "S4e", "S6d", "S8a", "S10", "S12"}
	TuneBaselines = []string{"soa", "p2c_ewma", "least_conn", "prequal"}
)

// Tuned is the result of [Tune].
type Tuned struct {
	Options selector.DRFCSWLCOptions
	Name    string // the lab strategy with those options
	// Score is the mean over scenarios of ln(p99 ÷ the best baseline's
	// p99), plus a penalty of 1 per point of success below the best
	// baseline's (beyond 0.1): 0 matches the best baseline everywhere,
	// below 0 beats it.
	TrainScore, HeldScore               float64
	DefaultTrainScore, DefaultHeldScore float64
}

// Tune searches drf_cswlc's knobs with a cuckoo search over the training
// scenarios and seeds, then scores the best found and the defaults on the
// held-out scenarios and seeds.
func Tune(ctx context.Context, cfg TuneConfig) (*Tuned, error) {
	if cfg.Train == nil {
		cfg.Train = TuneTrain
	}
	if cfg.Held == nil {
		cfg.Held = TuneHeld
	}
	if cfg.Seeds <= 0 {
		cfg.Seeds = 2
	}
	if cfg.Nests <= 0 {
		cfg.Nests = 8
	}
	if cfg.Generations <= 0 {
		cfg.Generations = 6
	}
	if cfg.Baselines == nil {
		cfg.Baselines = TuneBaselines
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	trainRef, err := reference(ctx, cfg.Train, cfg.Baselines, cfg.Seeds, 1)
	if err != nil {
		return nil, err
	}
	heldRef, err := reference(ctx, cfg.Held, cfg.Baselines, cfg.Seeds, cfg.Seeds+1)
	if err != nil {
		return nil, err
	}
	score := func(name string, scs []string, ref map[string]Cell, first int) (float64, error) {
		rep, err := Run(ctx, Config{Scenarios: scs, Strategies: []string{name}, Seeds: cfg.Seeds, FirstSeed: first})
		if err != nil {
			return 0, err
		}
		var sum float64
		for _, res := range rep.Results {
			c, r := res.Cells[0], ref[res.Scenario.Name]
			sum += math.Log(c.P99.Mean / r.P99.Mean)
			if lost := r.Success.Mean - c.Success.Mean - 0.001; lost > 0 {
				sum += 100 * lost // a point of success costs 1
			}
		}
		return sum / float64(len(rep.Results)), nil
	}
	lo, hi := make([]float64, len(knobs)), make([]float64, len(knobs))
	for i, k := range knobs {
		lo[i], hi[i] = k.lo, k.hi
		if k.log {
			lo[i], hi[i] = math.Log(k.lo), math.Log(k.hi)
		}
	}
	options := func(x []float64) selector.DRFCSWLCOptions {
		var o selector.DRFCSWLCOptions
		for i, k := range knobs {
			v := x[i]
			if k.log {
				v = math.Exp(v)
			}
			k.set(&o, v)
		}
		return o
	}
	var evalErr error
	n := 0
	best, _ := selector.Minimize(func(x []float64) float64 {
		if evalErr != nil || ctx.Err() != nil {
			return math.Inf(1)
		}
		name := knobString(options(x))
		s, err := score(name, cfg.Train, trainRef, 1)
		if err != nil {
			evalErr = err
			return math.Inf(1)
		}
		n++
		fmt.Fprintf(cfg.Progress, "tune %3d: %+.4f %s\n", n, s, name)
		return s
	}, lo, hi, cfg.Nests, cfg.Generations, cfg.Seed)
	if evalErr != nil {
		return nil, evalErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := &Tuned{Options: options(best)}
	t.Name = knobString(t.Options)
	var def selector.DRFCSWLCOptions
	defName := knobString(def)
	for _, e := range []struct {
		into  *float64
		name  string
		scs   []string
		ref   map[string]Cell
		first int
	}{
		{&t.TrainScore, t.Name, cfg.Train, trainRef, 1},
		{&t.HeldScore, t.Name, cfg.Held, heldRef, cfg.Seeds + 1},
		{&t.DefaultTrainScore, defName, cfg.Train, trainRef, 1},
		{&t.DefaultHeldScore, defName, cfg.Held, heldRef, cfg.Seeds + 1},
	} {
		if *e.into, err = score(e.name, e.scs, e.ref, e.first); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// reference is, per scenario, the cell of the baseline with the best p99
// among those with the best success (within 0.1 point).
func reference(ctx context.Context, scs, baselines []string, seeds, first int) (map[string]Cell, error) {
	rep, err := Run(ctx, Config{Scenarios: scs, Strategies: baselines, Seeds: seeds, FirstSeed: first})
	if err != nil {
		return nil, err
	}
	ref := map[string]Cell{}
	for _, res := range rep.Results {
		bestSuccess := 0.0
		for _, c := range res.Cells {
			bestSuccess = max(bestSuccess, c.Success.Mean)
		}
		var best Cell
		best.P99.Mean = math.Inf(1)
		for _, c := range res.Cells {
			if c.Success.Mean >= bestSuccess-0.001 && c.P99.Mean < best.P99.Mean {
				best = c
			}
		}
		best.Success.Mean = bestSuccess
		ref[res.Scenario.Name] = best
	}
	return ref, nil
}
