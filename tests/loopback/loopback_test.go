package loopback

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
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

var scenarios = []scenario{
	{
		lab:    "S1",
		title:  "far site: upstreams 0 and 1 at 1–2 ms, 2 and 3 at 80 ms",
		base:   []time.Duration{1 * time.Millisecond, 2 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond},
		faulty: -1,
		long:   true,
	},
	{
		lab:   "S2",
		title: fmt.Sprintf("slow node: upstream 2 answers %v late during the fault (others 1–5 ms)", slowBy),
		base:  healthy,
		fault: func(r *rig, on bool) {
			d := healthy[2]
			if on {
				d += slowBy
			}
			r.setLatency(2, d)
		},
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

// comparison is one pair of strategies on one metric in one scenario.
type comparison struct {
	scenario, metric string
	a, b             string
	simA, simB       float64 // means over seeds
	simSays          int     // -1: a clearly lower; +1: b clearly lower; 0: not clear
	loopA, loopB     float64 // pooled over rounds
	aWins, rounds    int     // rounds in which the loopback had a lower than b
	loopSays         int     // as simSays, from the loopback's rounds and pooled figures
	asserted         bool
	agree            bool
}

// simDirection is -1 when a is clearly lower than b on every seed, +1 when
// b is clearly lower than a, 0 otherwise.
func simDirection(m metric, a, b []float64) int {
	if len(a) == 0 || len(a) != len(b) {
		return 0
	}
	aLow, bLow := true, true
	for i := range a {
		if math.IsNaN(a[i]) || math.IsNaN(b[i]) {
			return 0
		}
		aLow = aLow && m.clear(a[i], b[i])
		bLow = bLow && m.clear(b[i], a[i])
	}
	switch {
	case aLow:
		return -1
	case bLow:
		return 1
	}
	return 0
}

func meanOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// compare builds the comparisons of one scenario.
func compare(sc scenario, strategies []string, sim map[string][]lab.Trial, loop map[string][][]blockResult) []comparison {
	var out []comparison
	ups := len(sc.base)
	for _, m := range metrics {
		if m.name == "faulty share" && (sc.faulty < 0 || sc.join) || m.join && !sc.join {
			continue
		}
		for i, a := range strategies {
			for _, b := range strategies[i+1:] {
				// The anchor prequal is shown against the baselines, not
				// asserted: the lab's penalty for it comes from queueing,
				// and these upstreams have no queue (see the package doc).
				// Every pair with the product's selector is asserted.
				anchorOnly := (a == "prequal" || b == "prequal") && a != "drf_cswlc" && b != "drf_cswlc"
				c := comparison{scenario: sc.lab, metric: m.name, a: a, b: b, asserted: m.asserted && !anchorOnly}
				var sa, sb []float64
				for _, tr := range sim[a] {
					sa = append(sa, m.sim(tr))
				}
				for _, tr := range sim[b] {
					sb = append(sb, m.sim(tr))
				}
				c.simA, c.simB, c.simSays = meanOf(sa), meanOf(sb), simDirection(m, sa, sb)
				c.loopA = m.loop(summarise(flatten(loop[a]), sc.faulty, ups))
				c.loopB = m.loop(summarise(flatten(loop[b]), sc.faulty, ups))
				for r := range loop[a] {
					ra := m.loop(summarise(loop[a][r], sc.faulty, ups))
					rb := m.loop(summarise(loop[b][r], sc.faulty, ups))
					c.rounds++
					if ra < rb {
						c.aWins++
					}
				}
				if c.aWins == c.rounds && m.clear(c.loopA, c.loopB) {
					c.loopSays = -1
				} else if c.aWins == 0 && m.clear(c.loopB, c.loopA) {
					c.loopSays = 1
				}
				switch c.simSays {
				case -1:
					c.agree = c.loopA < c.loopB
				case 1:
					c.agree = c.loopB < c.loopA
				}
				out = append(out, c)
			}
		}
	}
	return out
}

func flatten(rounds [][]blockResult) []blockResult {
	var out []blockResult
	for _, r := range rounds {
		out = append(out, r...)
	}
	return out
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

// docPath is docs/selector-loopback.md, from this package's directory.
func docPath() string { return filepath.Join("..", "..", "docs", "selector-loopback.md") }

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

// contradicts reports whether the loopback clearly orders an asserted pair
// against a clear lab: reversed in every round and by the metric's margin
// pooled (the 2× the lab needs to call an order clear). A loopback that
// splits its rounds, or reverses them by less (two short rounds on a shared
// machine reversed a 6.9 vs 6.6 ms mean that the lab puts at 36 vs 112 ms),
// is inconclusive, not a contradiction; the agreement count still counts
// every clear lab order.
func (c comparison) contradicts() bool {
	return c.asserted && c.simSays != 0 && c.loopSays == -c.simSays
}

func verdictLab(c comparison) string {
	m := metricByName(c.metric)
	switch c.simSays {
	case -1:
		return fmt.Sprintf("%s < %s (%s vs %s)", c.a, c.b, m.show(c.simA), m.show(c.simB))
	case 1:
		return fmt.Sprintf("%s < %s (%s vs %s)", c.b, c.a, m.show(c.simB), m.show(c.simA))
	}
	return fmt.Sprintf("no clear order (%s vs %s)", m.show(c.simA), m.show(c.simB))
}

func verdictLoop(c comparison) string {
	m := metricByName(c.metric)
	rel := "="
	switch {
	case c.loopA < c.loopB:
		rel = "<"
	case c.loopA > c.loopB:
		rel = ">"
	}
	return fmt.Sprintf("%s %s %s (%s vs %s; %s lower in %d of %d rounds)", c.a, rel, c.b, m.show(c.loopA), m.show(c.loopB), c.a, c.aWins, c.rounds)
}

func metricByName(name string) metric {
	for _, m := range metrics {
		if m.name == name {
			return m
		}
	}
	panic("loopback: no metric " + name)
}

// agreement counts the clear lab orderings that are asserted, and of them
// those the loopback agrees with.
func agreement(cs []comparison) (agreed, checked int) {
	for _, c := range cs {
		if c.asserted && c.simSays != 0 {
			checked++
			if c.agree {
				agreed++
			}
		}
	}
	return agreed, checked
}

// writeScenario writes one scenario's tables, in Markdown.
func writeScenario(w *strings.Builder, sc scenario, md mode, sim map[string][]lab.Trial, loop map[string][][]blockResult, cs []comparison) {
	fmt.Fprintf(w, "\n### %s — %s\n\n", sc.lab, sc.title)
	fmt.Fprintf(w, "| strategy | lab mean | loopback mean | lab p99 | loopback p99 | loopback p50 | lab faulty share | loopback faulty share | loopback packets | loopback append p99 |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, st := range md.strategies {
		var mean, p99, share []float64
		for _, tr := range sim[st] {
			mean, p99, share = append(mean, tr.Mean), append(p99, tr.P99), append(share, tr.FaultyShare)
		}
		s := summarise(flatten(loop[st]), sc.faulty, len(sc.base))
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", st,
			lab.Seconds(meanOf(mean)), lab.Seconds(s.mean), lab.Seconds(meanOf(p99)), lab.Seconds(s.p99), lab.Seconds(s.p50),
			lab.Percent(meanOf(share), 1), lab.Percent(s.share, 1), s.n, lab.Seconds(s.appendP99))
	}
	fmt.Fprintf(w, "\n| metric | pair | lab | loopback | verdict |\n|---|---|---|---|---|\n")
	for _, c := range cs {
		v := "not asserted"
		switch {
		case c.simSays == 0 && c.loopSays != 0:
			v = "only the loopback is clear"
		case c.simSays == 0:
			v = "lab not clear"
		case !c.asserted && c.agree:
			v = "agrees (not asserted)"
		case !c.asserted:
			v = "disagrees (not asserted)"
		case c.agree:
			v = "**agrees**"
		default:
			v = "**DISAGREES**"
		}
		fmt.Fprintf(w, "| %s | `%s` vs `%s` | %s | %s | %s |\n", c.metric, c.a, c.b, verdictLab(c), verdictLoop(c), v)
	}
	agreed, checked := agreement(cs)
	fmt.Fprintf(w, "\n%s: %d of %d clear lab orderings agree.\n", sc.lab, agreed, checked)
}

// renderDoc is docs/selector-loopback.md.
func renderDoc(md mode, tr tier) string {
	var w strings.Builder
	agreed, checked, cs := tr.agreed, tr.checked, tr.comps
	p := md.plan
	fmt.Fprintf(&w, `# Selector loopback tier

Generated by `+"`LOOPBACK_LONG=1 go test -count=1 -run TestLoopbackAgreesWithLab -timeout 60m ./tests/loopback/ -update`"+`;
do not edit by hand.

The lab (docs/selector-lab.md) ranks strategies in a simulator, and its
numbers are only as good as its model. This tier runs the gateway's own
delivery code — buffer, selector.Table, the strategy, uplink.Delivery,
uplink.HTTPSender (batch 50, window 8) and TCP probers — against four HTTP
upstreams on 127.0.0.1, each behind an in-process toxiproxy proxy that adds
its round trip and the fault, and checks that it moves in the same
direction as the lab: when the lab is clear that one strategy beats
another (same order on every seed, by a factor of two at least; for the
faulty share also by 3 points), the loopback must not put them clearly
in the other order (reversed in every round and by the same margin). See the package doc of tests/loopback.

Run: %d strategies, %d rounds alternated (A-B-C…, then …C-B-A), blocks of
%v warm-up on healthy upstreams then %v of fault, open-loop arrivals at
%.0f packets/s, latency from each packet's intended arrival to its ack
(packets of the fault window only); probes every %v. Lab: the mirrored
scenario, unchanged, %d seeds. Lab %v, loopback %v.

**Verdict: %d of %d clear lab orderings agree.**

The lab's figures are means over seeds; the loopback's are pooled over
rounds. Absolute numbers are not comparable between the tiers (the lab's
servers have 20 ms service times, queues and a 10 s timeout; the loopback's
answer at once after their round trip), only the order is. p99 is shown but
not asserted: a block's fault window is short, so the sends made before a
strategy notices the fault weigh more than in the lab's 30 s windows.
"Append p99" is how late packets were stored in the buffer after their
intended arrival (fsync, scheduling on a shared machine): noise common to
every strategy, not a result; where it is high, so are the latencies of
whatever ran then.
`, len(md.strategies), md.rounds, p.warmup, p.fault, p.rate, p.probeEvery, md.seeds,
		tr.simTook.Round(time.Second), tr.loopTook.Round(time.Second), agreed, checked)
	w.WriteString(tr.tables)
	w.WriteString("\n## Where only the loopback is clear\n\n")
	n := 0
	for _, c := range cs {
		if c.simSays == 0 && c.loopSays != 0 && c.metric != "p99" {
			lean := "the other way"
			if (c.simA < c.simB) == (c.loopA < c.loopB) {
				lean = "the same way"
			}
			fmt.Fprintf(&w, "- %s, %s: %s; the lab: %s, leaning %s.\n", c.scenario, c.metric, verdictLoop(c), verdictLab(c), lean)
			n++
		}
	}
	if n == 0 {
		w.WriteString("None.\n")
	}
	w.WriteString(`
These are not failures: the lab is not clear there, so nothing is
asserted. They are where the loopback sees more than the model, and worth
a look (p99 is left out of this list, for the reason above).

S4a is where this tier found the code parting from the model. The lab
models a fast failure as the server going down at once (Table.SetUp
false), so no strategy picks it during the outage. An HTTP upstream has no
connection to lose: the gateway used to learn of the outage only from its
next probe, and meanwhile a refused send, fast and leaving nothing in
flight, flattered the upstream's latency, so a strategy ranking by
in-flight count or latest latency (least_conn, soa) could prefer the
refusing upstream: soa sent it 7-10% of the traffic in short runs. The
uplink now treats a refused connection as a failed probe (the upstream is
down until a probe answers), as the model assumes; this run is after that
change.
`)
	return w.String()
}
