package lab

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Config says what [Run] runs.
type Config struct {
	// Scenarios selects scenarios by name or name prefix ("S4" is S4a to
	// S4f; "S1" is S1, not S10). Empty: all of [Scenarios]; S14 and S15
	// (a node at its limit, fleets of 1,000 and 10,000) only by name.
	Scenarios []string
	// Strategies to compare. Empty: [DefaultStrategies].
	Strategies []string
	// Seeds is how many seeds (FirstSeed, FirstSeed+1, …) each scenario ×
	// strategy runs. Default 20.
	Seeds int
	// FirstSeed is the first seed; 0 means 1. The tuner holds out seeds
	// with it.
	FirstSeed int
	// Parallel is how many simulations run at once. Default GOMAXPROCS.
	// It does not change the results.
	Parallel int
	// Progress, when set, gets a line per finished scenario (written from
	// the simulating goroutines).
	Progress io.Writer
	// SingleAttempt runs every scenario without retries (see
	// Scenario.SingleAttempt): today's view of a single attempt.
	SingleAttempt bool

	adjust func(Scenario) Scenario // tests shorten scenarios with it
}

// Cell is one scenario × strategy over every seed.
type Cell struct {
	Strategy             string
	Mean, P50, P99, P999 Estimate // seconds
	Success, Success1s   Estimate
	Success10s           Estimate
	FirstSuccess         Estimate
	Retried              Estimate
	FaultyShare, Jain    Estimate
	Share                []float64 // mean over seeds of the faulty upstream's share, by second
	Runs                 []Trial
	Requests             int // per seed, mean

	Osc                         Estimate
	SettleFault, SettleRecovery Censored
	JoinSettle, JoinRamp        Censored
	JoinPeak, JoinP99           Estimate
	PlaceBefore, PlaceJain      Estimate
	PlaceMax, Overloaded        Estimate
	Reconnect, Balanced         Censored

	BusiestSteady, BusiestDown Estimate // see Trial
	Back                       Censored
	Swing                      Estimate
}

// Censored is a time that may never come (a run that never settled): the
// estimate over the runs where it came, and how many runs it never did.
type Censored struct {
	Estimate
	Never, Runs int
}

// Result is one scenario's cells, in strategy order.
type Result struct {
	Scenario Scenario
	Cells    []Cell
}

// Report is a whole lab run.
type Report struct {
	Seeds         int
	Strategies    []string
	SingleAttempt bool // see Config.SingleAttempt
	Results       []Result
}

// Select returns the scenarios that names select (see Config.Scenarios).
func Select(names []string) ([]Scenario, error) {
	all := Scenarios()
	if len(names) == 0 {
		return all, nil
	}
	all = append(all, extraScenarios()...)
	var out []Scenario
	for _, sc := range all {
		for _, n := range names {
			if selects(n, sc.Name) {
				out = append(out, sc)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("lab: no scenario matches %s", strings.Join(names, ","))
	}
	return out, nil
}

// selects reports whether n names scenario name or is its prefix short
// of a digit: "S4" is S4a to S4f, "S1" is S1 but not S10.
func selects(n, name string) bool {
	n, name = strings.ToUpper(n), strings.ToUpper(name)
	rest, ok := strings.CutPrefix(name, n)
	return n != "" && ok && (rest == "" || rest[0] < '0' || rest[0] > '9')
}

// Run runs every selected scenario × strategy × seed. The Report depends
// only on cfg's scenarios, strategies and seeds.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	scs, err := Select(cfg.Scenarios)
	if err != nil {
		return nil, err
	}
	strats := cfg.Strategies
	if len(strats) == 0 {
		strats = DefaultStrategies()
	}
	for _, s := range strats {
		if _, err := NewStrategy(s); err != nil {
			return nil, err
		}
	}
	seeds := cfg.Seeds
	if seeds <= 0 {
		seeds = 20
	}
	par := cfg.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	rep := &Report{Seeds: seeds, Strategies: strats, SingleAttempt: cfg.SingleAttempt}
	for i := range scs {
		scs[i].SingleAttempt = cfg.SingleAttempt
		if cfg.adjust != nil {
			scs[i] = cfg.adjust(scs[i])
		}
	}
	// One pool over every run; job j is scenario j/per, strategy
	// (j%per)/seeds, seed j%seeds + 1.
	per := len(strats) * seeds
	runs := make([]Trial, len(scs)*per)
	errs := make([]error, len(runs))
	left := make([]atomic.Int32, len(scs))
	for i := range left {
		left[i].Store(int32(per))
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	var progress sync.Mutex
	for range par {
		wg.Go(func() {
			for j := range jobs {
				k := j % per
				runs[j], errs[j] = Simulate(scs[j/per], strats[k/seeds], uint64(k%seeds)+uint64(max(cfg.FirstSeed, 1)))
				if left[j/per].Add(-1) == 0 && cfg.Progress != nil {
					progress.Lock()
					fmt.Fprintf(cfg.Progress, "lab: %s done (%d runs)\n", scs[j/per].Name, per)
					progress.Unlock()
				}
			}
		})
	}
	// The biggest scenarios first, so that the last runs are short ones
	// and every worker stays busy to the end.
	order := make([]int, len(scs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return scs[b].Gateways - scs[a].Gateways })
feed:
	for _, i := range order {
		for j := i * per; j < (i+1)*per; j++ {
			select {
			case jobs <- j:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	for i, sc := range scs {
		res := Result{Scenario: sc}
		for k, st := range strats {
			res.Cells = append(res.Cells, summarise(st, runs[i*per+k*seeds:i*per+(k+1)*seeds]))
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

func summarise(name string, rs []Trial) Cell {
	c := Cell{Strategy: name, Runs: rs}
	pick := func(f func(Trial) float64) Estimate {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return Bootstrap(v)
	}
	c.Mean = pick(func(r Trial) float64 { return r.Mean })
	c.P50 = pick(func(r Trial) float64 { return r.P50 })
	c.P99 = pick(func(r Trial) float64 { return r.P99 })
	c.P999 = pick(func(r Trial) float64 { return r.P999 })
	c.Success = pick(func(r Trial) float64 { return r.Success })
	c.Success1s = pick(func(r Trial) float64 { return r.Success1s })
	c.Success10s = pick(func(r Trial) float64 { return r.Success10s })
	c.FirstSuccess = pick(func(r Trial) float64 { return r.FirstSuccess })
	c.Retried = pick(func(r Trial) float64 { return r.Retried })
	c.FaultyShare = pick(func(r Trial) float64 { return r.FaultyShare })
	c.Jain = pick(func(r Trial) float64 { return r.Jain })
	c.Osc = pick(func(r Trial) float64 { return r.Osc })
	c.JoinPeak = pick(func(r Trial) float64 { return r.JoinPeak })
	c.JoinP99 = pick(func(r Trial) float64 { return r.JoinP99 })
	c.PlaceBefore = pick(func(r Trial) float64 { return r.PlaceBefore })
	c.PlaceJain = pick(func(r Trial) float64 { return r.PlaceJain })
	c.PlaceMax = pick(func(r Trial) float64 { return r.PlaceMax })
	c.Overloaded = pick(func(r Trial) float64 {
		if math.IsNaN(r.PlaceMax) { // not a placement scenario
			return math.NaN()
		}
		return float64(r.Overloaded)
	})
	c.BusiestSteady = pick(func(r Trial) float64 { return r.BusiestSteady })
	c.BusiestDown = pick(func(r Trial) float64 { return r.BusiestDown })
	c.Swing = pick(func(r Trial) float64 { return r.Swing })
	censored := func(f func(Trial) float64) Censored {
		var v []float64
		var out Censored
		for _, r := range rs {
			switch x := f(r); {
			case math.IsNaN(x):
			case math.IsInf(x, 1):
				out.Never++
				out.Runs++
			default:
				v = append(v, x)
				out.Runs++
			}
		}
		out.Estimate = Bootstrap(v)
		return out
	}
	c.SettleFault = censored(func(r Trial) float64 { return r.SettleFault })
	c.SettleRecovery = censored(func(r Trial) float64 { return r.SettleRecovery })
	c.JoinSettle = censored(func(r Trial) float64 { return r.JoinSettle })
	c.JoinRamp = censored(func(r Trial) float64 { return r.JoinRamp })
	c.Reconnect = censored(func(r Trial) float64 { return r.Reconnect })
	c.Balanced = censored(func(r Trial) float64 { return r.Balanced })
	c.Back = censored(func(r Trial) float64 { return r.Back })
	n := 0
	for _, r := range rs {
		n += r.Requests
		if r.Share != nil {
			if c.Share == nil {
				c.Share = make([]float64, len(r.Share))
			}
			for k, x := range r.Share {
				c.Share[k] += x / float64(len(rs))
			}
		}
	}
	c.Requests = n / max(len(rs), 1)
	return c
}

// successSlack is how much lower than the best a success rate may be and
// still not count as losing it: 0.1 percentage point.
const successSlack = 0.001

// nearBest is how far above the best p99 a p99 may be and count as near it.
const nearBest = 1.05

// Standing is one strategy's overall result for the verdict.
type Standing struct {
	Strategy string
	// Score is the geometric mean over scenarios of its p99 over the best
	// p99 in that scenario: 1 is best everywhere.
	Score float64
	// Losses lists the scenarios where its success rate was more than 0.1
	// point below the best one.
	Losses []string
	// Near is how many scenarios its p99 is within 5% of the best in.
	Near int
}

// Standings ranks the strategies over every scenario that ran: those that
// never lose success first, then by Score.
func (r *Report) Standings() []Standing {
	st := make([]Standing, len(r.Strategies))
	logs := make([]float64, len(r.Strategies))
	for k, s := range r.Strategies {
		st[k].Strategy = s
	}
	for _, res := range r.Results {
		best, bestOK := math.Inf(1), 0.0
		for _, c := range res.Cells {
			best = min(best, c.P99.Mean)
			bestOK = max(bestOK, c.Success.Mean)
		}
		for k, c := range res.Cells {
			logs[k] += math.Log(c.P99.Mean / best)
			if c.P99.Mean <= nearBest*best {
				st[k].Near++
			}
			if c.Success.Mean < bestOK-successSlack {
				st[k].Losses = append(st[k].Losses, res.Scenario.Name)
			}
		}
	}
	for k := range st {
		st[k].Score = math.Exp(logs[k] / float64(max(len(r.Results), 1)))
	}
	slices.SortStableFunc(st, func(a, b Standing) int {
		if a.Losses == nil != (b.Losses == nil) {
			if a.Losses == nil {
				return -1
			}
			return 1
		}
		if a.Losses != nil && len(a.Losses) != len(b.Losses) {
			return len(a.Losses) - len(b.Losses)
		}
		switch {
		case a.Score < b.Score:
			return -1
		case a.Score > b.Score:
			return 1
		}
		return 0
	})
	return st
}

// cell returns the cell of strategy s in scenario name, or nil.
func (r *Report) cell(name, s string) *Cell {
	for i := range r.Results {
		if r.Results[i].Scenario.Name != name {
			continue
		}
		for k := range r.Results[i].Cells {
			if r.Results[i].Cells[k].Strategy == s {
				return &r.Results[i].Cells[k]
			}
		}
	}
	return nil
}
