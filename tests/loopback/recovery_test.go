package loopback

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"fieldlink/selector"
	"fieldlink/selector/lab"
)

// recoverySlowBy is how late the slow broker's PUBACKs come in the
// recovery measure: more than a second, so that every packet it is sent
// while slow misses the 1 s mark, as in the lab's S2 (2 s median).
const recoverySlowBy = 1200 * time.Millisecond

// recoveryVariant is one way of running drf_cswlc over the brokers.
type recoveryVariant struct {
	name         string
	publishProbe bool
	decay        time.Duration // 0: the default
}

// recovered is how long after the fault's end the faulty upstream was
// first sent a packet, or -1 if it never was before end. (Its share of a
// bin is no measure: among equal upstreams with nothing in flight,
// drf_cswlc sends to the lowest estimate, so a healthy upstream's share
// swings between none and all.)
func recovered(b blockResult, end time.Duration) time.Duration {
	for _, s := range b.trace {
		if s.at >= b.to && s.at < end && s.idx == 2 {
			return s.at - b.to
		}
	}
	return -1
}

// afterShare is the faulty upstream's share of the sends from the fault's
// end to end.
func afterShare(b blockResult, end time.Duration) float64 {
	var picks, hits int
	for _, s := range b.trace {
		if s.at >= b.to && s.at < end {
			picks++
			if s.idx == 2 {
				hits++
			}
		}
	}
	return float64(hits) / float64(max(picks, 1))
}

// within1s is the share of b's fault-window packets acked within 1 s.
func within1s(b blockResult) float64 {
	n := 0
	for _, l := range b.lat {
		if l <= time.Second {
			n++
		}
	}
	return float64(n) / float64(len(b.lat))
}

// TestRecovery measures, for drf_cswlc over the three brokers, how soon
// after a slow broker recovers it carries traffic again (its first send),
// and the share
// of the slow phase's packets acked within 1 s, for each probe (a TCP
// connect, or a QoS 1 publish timed to its PUBACK) and a few decays of the
// latency estimate; and the lab's S2 for the same decays (its probes are
// the network's round trip, as a TCP connect's). It reports the figures
// (the targets: back within 3 s, 99.9% within 1 s), and fails where the
// publish probe with drf_cswlc's defaults misses them by far. Long mode
// only (LOOPBACK_LONG=1): about four minutes.
func TestRecovery(t *testing.T) {
	if os.Getenv("LOOPBACK_LONG") != "1" {
		t.Skip("LOOPBACK_LONG=1 runs the recovery measure (a few minutes)")
	}
	const rounds = 2
	plan := blockPlan{rate: 200, warmup: 2 * time.Second, fault: 8 * time.Second, after: 6 * time.Second,
		drain: 5 * time.Second, probeEvery: time.Second, timeout: 3 * time.Second}
	// Three equal brokers, so that the slow one has a share of its own to
	// come back to.
	const rtt = 2 * time.Millisecond
	base := []time.Duration{rtt, rtt, rtt}
	sc := scenario{lab: "S2", base: base, faulty: 2, fault: slowNode(base, 2, recoverySlowBy)}
	def := selector.DRFCSWLCOptions{}.WithDefaults()
	// The first is the pool's wiring today (a TCP probe); the second the
	// fix (a publish probe), both with drf_cswlc's defaults; then the
	// trade-off of the decay under each probe.
	variants := []recoveryVariant{
		{name: "tcp probe, default decay"},
		{name: "publish probe, default decay", publishProbe: true},
		{name: "tcp probe, decay 1 s", decay: time.Second},
		{name: "tcp probe, decay 300 ms", decay: 300 * time.Millisecond},
		{name: "publish probe, decay 1 s", publishProbe: true, decay: time.Second},
		{name: "publish probe, decay 300 ms", publishProbe: true, decay: 300 * time.Millisecond},
	}
	r := newMQTTRig(t, len(healthy3))
	res := make([][]blockResult, len(variants))
	for round := range rounds {
		order := make([]int, len(variants))
		for i := range order {
			order[i] = i
		}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			p := plan
			p.publishProbe = variants[v].publishProbe
			if variants[v].decay > 0 {
				p.drf = &selector.DRFCSWLCOptions{Decay: variants[v].decay}
			}
			res[v] = append(res[v], r.runBlock("drf_cswlc", sc, p))
		}
	}

	var rep strings.Builder
	fmt.Fprintf(&rep, "broker 2 %v late for %v, then %v of recovery; drf_cswlc defaults: decay %v, warm-up %v; %d blocks each\n",
		recoverySlowBy, plan.fault, plan.after, def.Decay, def.WarmUp, rounds)
	fmt.Fprintf(&rep, "| variant | first send after recovery (each block) | its share after | slow phase acked ≤ 1 s | slow-phase sends to the slow broker |\n|---|---|---|---:|---:|\n")
	const fixed = 1 // the publish probe with the defaults
	var fixedBack []time.Duration
	var fixedShare float64
	for v, blocks := range res {
		var backs, shares []string
		n, ok, hits := 0, 0.0, 0
		for _, b := range blocks {
			back := recovered(b, plan.warmup+plan.fault+plan.after)
			shares = append(shares, fmt.Sprintf("%.0f%%", 100*afterShare(b, plan.warmup+plan.fault+plan.after)))
			if back < 0 {
				backs = append(backs, "never")
			} else {
				backs = append(backs, fmt.Sprintf("%.2f s", back.Seconds()))
			}
			if v == fixed {
				fixedBack = append(fixedBack, back)
			}
			n += len(b.lat)
			ok += within1s(b) * float64(len(b.lat))
			hits += b.faultyHits
		}
		share := ok / float64(n)
		if v == fixed {
			fixedShare = share
		}
		fmt.Fprintf(&rep, "| %s | %s | %s | %.2f%% | %d |\n", variants[v].name, strings.Join(backs, ", "), strings.Join(shares, ", "), 100*share, hits)
	}

	// The lab's S2, for the same decays.
	var s2 lab.Scenario
	for _, ls := range lab.Scenarios() {
		if ls.Name == "S2" {
			s2 = ls
		}
	}
	fmt.Fprintf(&rep, "\nlab S2, drf_cswlc, 3 seeds:\n| decay | settle after recovery | acked ≤ 1 s |\n|---|---:|---:|\n")
	for _, d := range []time.Duration{0, 3 * time.Second, 2 * time.Second, 1500 * time.Millisecond, time.Second, 500 * time.Millisecond, 300 * time.Millisecond} {
		name, label := "drf_cswlc", "default"
		if d > 0 {
			name, label = fmt.Sprintf("drf_cswlc:decay=%d", d.Milliseconds()), d.String()
		}
		var settle, one []float64
		never := 0
		for seed := range 3 {
			tr, err := lab.Simulate(s2, name, uint64(seed)+1)
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(tr.SettleRecovery) || math.IsInf(tr.SettleRecovery, 1) {
				never++
			} else {
				settle = append(settle, tr.SettleRecovery)
			}
			one = append(one, tr.Success1s)
		}
		fmt.Fprintf(&rep, "| %s | %.1f s (%d never) | %.2f%% |\n", label, meanOf(settle), never, 100*meanOf(one))
	}
	t.Logf("recovery:\n%s", rep.String())

	// Generous bounds on figures timed on a shared machine: the target is
	// 3 s and 99.9%.
	for i, b := range fixedBack {
		if b < 0 || b > 5*time.Second {
			t.Errorf("%s, block %d: the recovered broker was sent a packet again after %v, want within 5 s", variants[fixed].name, i+1, b)
		}
	}
	if fixedShare < 0.998 {
		t.Errorf("%s: %.2f%% of the slow phase's packets acked within 1 s, want 99.8%%", variants[fixed].name, 100*fixedShare)
	}
}
