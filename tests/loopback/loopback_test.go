package loopback

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/selector/lab"
)

// update has the long run rewrite docs/selector-loopback.md; a test writes
// into docs/ only when asked.
var update = flag.Bool("update", false, "with LOOPBACK_LONG=1: rewrite docs/selector-loopback.md from the run")

// mode is the size of a run: the default fits a CI run under -race; the
// long one (LOOPBACK_LONG=1) is the one docs/selector-loopback.md reports.
type mode struct {
	name       string
	strategies []string
	rounds     int
	plan       blockPlan
	seeds      int // lab seeds per scenario and strategy
}

var (
	shortMode = mode{
		name:       "default",
		strategies: []string{"drf_cswlc", "prequal", "soa", "p2c_ewma"},
		rounds:     2,
		plan: blockPlan{rate: 250, warmup: 400 * time.Millisecond, fault: 1200 * time.Millisecond, drain: 5 * time.Second,
			probeEvery: time.Second, timeout: time.Second},
		seeds: 1, // the lab is the costly part under -race; long mode runs 5
	}
	longMode = mode{
		name:       "long",
		strategies: []string{"drf_cswlc", "prequal", "soa", "p2c_ewma", "least_conn", "round_robin"},
		rounds:     4,
		plan: blockPlan{rate: 200, warmup: 2 * time.Second, fault: 10 * time.Second, drain: 10 * time.Second,
			probeEvery: time.Second, timeout: 3 * time.Second},
		seeds: 5,
	}
)

// scenario is a loopback situation and the lab scenario it mirrors.
type scenario struct {
	lab    string // the lab scenario's name
	title  string
	base   []time.Duration // each upstream's round trip
	fault  fault
	faulty int // the upstream whose share is measured; -1 for none
	// join: the faulty upstream is not in the table until the fault
	// starts, and joins then, cold.
	join bool
	long bool // in the long mode only
}

// healthy are the round trips of four healthy upstreams.
var healthy = []time.Duration{1 * time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond}

// slowBy is how much later the slow node of S2 answers.
const slowBy = 300 * time.Millisecond

// slowNode is S2's fault: upstream i of base answers by later than its
// round trip while the fault is on.
func slowNode(base []time.Duration, i int, by time.Duration) func(r *rig, on bool) {
	return func(r *rig, on bool) {
		d := base[i]
		if on {
			d += by
		}
		r.setLatency(i, d)
	}
}

var scenarios = []scenario{
	{
		lab:    "S1",
		title:  "far site: upstreams 0 and 1 at 1–2 ms, 2 and 3 at 80 ms",
		base:   []time.Duration{1 * time.Millisecond, 2 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond},
		faulty: -1,
		long:   true,
	},
	{
		lab:    "S2",
		title:  fmt.Sprintf("slow node: upstream 2 answers %v late during the fault (others 1–5 ms)", slowBy),
		base:   healthy,
		fault:  slowNode(healthy, 2, slowBy),
		faulty: 2,
	},
	{
		lab:    "S4a",
		title:  "outage: upstream 2's proxy stopped during the fault, connections refused (others 1–5 ms)",
		base:   healthy,
		fault:  func(r *rig, on bool) { r.setDown(2, on) },
		faulty: 2,
		// The lab orders none of the default strategies here (none picks a
		// refusing upstream), so the default run would assert nothing.
		long: true,
	},
	{
		lab:    "S4c",
		title:  "black hole: upstream 2's proxy accepts and never answers during the fault (others 1–5 ms)",
		base:   healthy,
		fault:  func(r *rig, on bool) { r.setBlackHole(2, on) },
		faulty: 2,
	},
	{
		lab:    "S11",
		title:  "sinkhole: upstream 2 answers every batch with HTTP 500 at once during the fault (others 1–5 ms)",
		base:   healthy,
		fault:  func(r *rig, on bool) { r.sink[2].Store(on) },
		faulty: 2,
	},
	{
		lab:    "S7",
		title:  "cold join: upstream 3 enters the table (Table.Add, Delivery.Add) when the fault window starts (all 1–5 ms)",
		base:   healthy,
		faulty: 3,
		join:   true,
	},
}

// scenariosOf are the scenarios a mode runs.
func scenariosOf(md mode) []scenario {
	var out []scenario
	for _, sc := range scenarios {
		if !sc.long || md.name == "long" {
			out = append(out, sc)
		}
	}
	return out
}

// metric is a figure compared between strategies; lower is better.
type metric struct {
	name     string
	loop     func(summary) float64
	sim      func(lab.Trial) float64
	asserted bool
	// join: the metric is of join scenarios only (else of the others).
	join bool
	// clear reports whether lower, on every seed, is clearly below higher.
	clear func(lower, higher float64) bool
	show  func(float64) string
}

var metrics = []metric{
	{
		name: "mean", asserted: true,
		loop:  func(s summary) float64 { return s.mean },
		sim:   func(tr lab.Trial) float64 { return tr.Mean },
		clear: func(lo, hi float64) bool { return hi >= 2*lo },
		show:  lab.Seconds,
	},
	{
		name: "p99",
		loop: func(s summary) float64 { return s.p99 },
		sim:  func(tr lab.Trial) float64 { return tr.P99 },
		// Shown, not asserted: see the package doc.
		clear: func(lo, hi float64) bool { return hi >= 2*lo },
		show:  lab.Seconds,
	},
	{
		name: "faulty share", asserted: true,
		loop:  func(s summary) float64 { return s.share },
		sim:   func(tr lab.Trial) float64 { return tr.FaultyShare },
		clear: func(lo, hi float64) bool { return hi >= 2*lo && hi-lo >= 0.03 },
		show:  func(x float64) string { return lab.Percent(x, 1) },
	},
	{
		// The joiner's peak share over its fair share. Shown, not
		// asserted: lower is not better (a strategy that never uses the
		// joiner has peak 0), and a block's bins hold a few dozen sends.
		name: "join peak", join: true,
		loop:  func(s summary) float64 { return s.joinPeak },
		sim:   func(tr lab.Trial) float64 { return tr.JoinPeak },
		clear: func(lo, hi float64) bool { return hi >= 1.5*lo && hi-lo >= 0.3 },
		show:  lab.Ratio,
	},
}

// simResults are the lab's trials by scenario, strategy and seed.
type simResults map[string]map[string][]lab.Trial

// simulate runs every lab scenario of scs for every strategy and seed, on
// GOMAXPROCS goroutines.
func simulate(t *testing.T, scs []scenario, strategies []string, seeds int) simResults {
	t.Helper()
	// By exact name: lab.Select matches prefixes of the upper-cased name,
	// which misses "S4a".
	var labScs []lab.Scenario
	for _, sc := range scs {
		found := false
		for _, ls := range lab.Scenarios() {
			if ls.Name == sc.lab {
				labScs, found = append(labScs, ls), true
				break
			}
		}
		if !found {
			t.Fatalf("lab has no scenario %s", sc.lab)
		}
	}
	type job struct {
		sc       lab.Scenario
		strategy string
		seed     int
	}
	res := simResults{}
	var jobs []job
	for _, sc := range labScs {
		res[sc.Name] = map[string][]lab.Trial{}
		for _, st := range strategies {
			res[sc.Name][st] = make([]lab.Trial, seeds)
			for seed := range seeds {
				jobs = append(jobs, job{sc, st, seed})
			}
		}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		next = make(chan job)
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range next {
				tr, err := lab.Simulate(j.sc, j.strategy, uint64(j.seed)+1)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("lab %s %s seed %d: %w", j.sc.Name, j.strategy, j.seed+1, err))
				}
				res[j.sc.Name][j.strategy][j.seed] = tr
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return res
}

// TestLoopbackAgreesWithLab runs each scenario's strategies alternated over
// real sockets, runs the mirrored lab scenario, and fails when the lab says
// clearly that one strategy beats another and the loopback says the
// opposite.
func TestLoopbackAgreesWithLab(t *testing.T) {
	md := modeOf(t)
	scs := scenariosOf(md)
	var r *rig
	tier := runTier(t, md, scs, func() *rig { r = newRig(t, 4); return r })
	t.Logf("lab %v, loopback %v, %d upstream posts\n%s\n%d of %d clear lab orderings agree", tier.simTook.Round(time.Second),
		tier.loopTook.Round(time.Second), r.posts.Load(), tier.tables, tier.agreed, tier.checked)
	if *update {
		path := docPath()
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The MQTT section has its own run (TestLoopbackMQTTAgreesWithLab): keep it.
		doc := renderDoc(md, tier) + mqttSectionOf(string(old))
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}

// modeOf is the run's mode, from LOOPBACK_LONG; -update asks for the long
// one.
func modeOf(t *testing.T) mode {
	t.Helper()
	md := shortMode
	if os.Getenv("LOOPBACK_LONG") == "1" {
		md = longMode
	}
	if *update && md.name != "long" {
		t.Fatal("-update rewrites docs/selector-loopback.md from the long run only: set LOOPBACK_LONG=1")
	}
	return md
}

// tier is what one run of the scenarios over a rig found.
type tier struct {
	tables            string // the scenarios' Markdown tables
	comps             []comparison
	agreed, checked   int
	simTook, loopTook time.Duration
	sends             int // every send of every block
}

// runTier runs the lab scenarios of scs, then, over the rig that newRig
// starts, each scenario's strategies alternated A-B-C-D, D-C-B-A for the
// mode's rounds; it fails the test where the loopback orders two
// strategies against a clear lab, or where the lab was clear about none.
func runTier(t *testing.T, md mode, scs []scenario, newRig func() *rig) tier {
	t.Helper()
	started := time.Now()
	sim := simulate(t, scs, md.strategies, md.seeds)
	var out tier
	out.simTook = time.Since(started)

	r := newRig()
	loop := map[string]map[string][][]blockResult{} // scenario, strategy, round
	for _, sc := range scs {
		loop[sc.lab] = map[string][][]blockResult{}
		for round := range md.rounds {
			// A-B-C-D, then D-C-B-A: a linear drift costs every strategy
			// alike.
			order := append([]string(nil), md.strategies...)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, st := range order {
				res := r.runBlock(st, sc, md.plan)
				out.sends += res.sends
				loop[sc.lab][st] = append(loop[sc.lab][st], []blockResult{res})
				if res.lost > 0 {
					t.Errorf("%s %s round %d: %d packets of %d not acked %v after the last arrival",
						sc.lab, st, round+1, res.lost, len(res.lat), md.plan.drain)
				}
			}
		}
	}
	out.loopTook = time.Since(started) - out.simTook

	var rep strings.Builder
	for _, sc := range scs {
		cs := compare(sc, md.strategies, sim[sc.lab], loop[sc.lab])
		out.comps = append(out.comps, cs...)
		writeScenario(&rep, sc, md, sim[sc.lab], loop[sc.lab], cs)
	}
	out.tables = rep.String()
	out.agreed, out.checked = agreement(out.comps)
	for _, c := range out.comps {
		if c.contradicts() {
			t.Errorf("%s %s: the lab says %s (the loopback says %s)", c.scenario, c.metric, verdictLab(c), verdictLoop(c))
		}
	}
	if out.checked == 0 {
		t.Error("the lab was clear about no pair: nothing was checked")
	}
	return out
}
