//go:build cluster

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// TestFleetBrokers is TestFleet on three independent mosquitto brokers:
// each gateway has the three as upstreams, the platform subscribes to each,
// and one broker is killed, then started again on its port. Brokers that
// answer alike leave the selector nothing to prefer, so the default is held
// to the targets of alike nodes (docs/cluster.md): the busiest broker at
// most brokerTarget (brokerTargetShort in the short run) times its fair share in steady state and with one down,
// the restarted broker carrying a sixth of the fleet's traffic over 1 s
// within targetNodeBack (and targetNodeBackMargin) of its port accepting
// connections again (mosquitto answers a CONNACK at once), its 1 s shares
// within targetSwingBack after, and nothing lost.
//
// make cluster-check runs the short version (drf_cswlc, 8 s steady, 8 s
// down, 12 s after: about 35 s); CLUSTER_FLEET=1 (make cluster-check-fleet)
// runs drf_cswlc, p2c_ewma and round_robin with 15 s, 15 s and 30 s;
// CLUSTER_FLEET_STRATEGIES and CLUSTER_FLEET_HOLD as TestFleet.
func TestFleetBrokers(t *testing.T) {
	bin := testtool.FindMosquitto(t)
	plan := fleetPlan{steady: 8 * time.Second, down: 8 * time.Second, after: 12 * time.Second}
	target := brokerTargetShort
	if os.Getenv("CLUSTER_FLEET") != "" {
		plan = fleetPlan{steady: 15 * time.Second, down: 15 * time.Second, after: 30 * time.Second}
		target = brokerTarget
	}
	var runs []fleetRun
	for _, strat := range fleetStrategies() {
		t.Run(strat, func(t *testing.T) {
			led := newLedger()
			runs = append(runs, runFleet(t, strat, plan, led, mosquittoFleet(t, bin, led, target)))
		})
	}
	for _, r := range runs {
		fmt.Println(r.line) // the figures, for make's grep
	}
}

// brokerTarget is the busiest broker's share over its fair share that the
// default may reach on brokers that answer alike, steady and with one down.
// The short run's 8 s windows on a shared 2-core machine sample more
// noise than the full run's 15 s (one short run reached 1.23× at a load of
// 15, against 1.05× at 9): make test's run fails at brokerTargetShort, so
// that chance does not fail it; a herd, at 2× and more, fails either.
const (
	brokerTarget      = 1.25
	brokerTargetShort = 1.3
)

// mosquittoFleet starts three independent brokers and a platform
// subscriber with a persistent session on each, recording into led. Each
// broker saves its sessions every second, so that one killed and started
// again still holds the subscriber's subscription and queues for it until
// it reconnects.
func mosquittoFleet(t *testing.T, bin string, led *ledger, target float64) fleetBrokers {
	b := fleetBrokers{
		kind:    "brokers fleet",
		pick:    func() (int, int) { return 1, -1 },
		stalls:  func() int { return 0 },
		targets: fleetTargets{steady: target, down: target, down5s: targetDown5s, fromAccept: true},
	}
	var ms [3]*testtool.Mosquitto
	for i := range ms {
		dir := t.TempDir()
		ms[i] = testtool.NewMosquitto(t, bin, "persistence true", "persistence_location "+dir+string(filepath.Separator), "autosave_interval 1")
		b.addrs[i], b.names[i] = ms[i].Addr(), "m"+strconv.Itoa(i+1)
		subscribe(t, led, ms[i].Addr())
	}
	time.Sleep(1500 * time.Millisecond) // the subscriptions saved (autosave_interval)
	b.kill = func(i int) { ms[i].Kill() }
	b.start = func(i int) { ms[i].Start() }
	return b
}
