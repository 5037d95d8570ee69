//go:build cluster

package cluster

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// scaleSteps are the fleet sizes TestScale tries, in order, by default.
var scaleSteps = []int{50, 100, 200, 300, 400, 600, 800}

// A step keeps up when, over its scaleHold, the fleet stored at least
// scaleKept of the packets its schedules call for, the nodes acknowledged
// at least scaleKept of what it stored, the backlog grew by less than a
// second of the fleet's rate, and the fleet's PUBACK p99 stayed within
// scaleP99.
const (
	scaleSettle = 5 * time.Second
	scaleHold   = 15 * time.Second
	scaleKept   = 0.95
	scaleP99    = time.Second
)

// TestScale finds how many real gateways this machine holds against the
// cluster: gateways (agents in the test process, as TestFleet's, each
// through a proxy per node that times PUBACKs) are added step by step
// (CLUSTER_SCALE_STEPS, default scaleSteps), each step held scaleHold;
// the first step that does not keep up (see scaleKept) ends the ramp, and
// the largest that did is the fleet the machine holds. Then, at that
// size, a node that does not lead $MQTT_msgs is killed for 10 s and
// started again: the busiest node's share with it down, its reconnection
// storm (the most connections it gained in a second) and when its share
// of the traffic is back (a sixth, then nine tenths of a third, over 5 s).
// The figures carry the load average: the machine is shared. A measurement
// of the long mode (CLUSTER_FLEET=1 or CLUSTER_SCALE=1, make
// cluster-check-fleet), with the default selector or CLUSTER_SCALE_STRATEGY;
// it fails on a packet lost, and when not even the first step keeps up.
func TestScale(t *testing.T) {
	if os.Getenv("CLUSTER_FLEET") == "" && os.Getenv("CLUSTER_SCALE") == "" {
		t.Skip("the long mode's: CLUSTER_FLEET=1 (make cluster-check-fleet) or CLUSTER_SCALE=1")
	}
	bin := testtool.RequireSbin(t, "nats-server", "nats-server")
	steps := scaleSteps
	if s := os.Getenv("CLUSTER_SCALE_STEPS"); s != "" {
		steps = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				t.Fatalf("CLUSTER_SCALE_STEPS=%q: want fleet sizes", s)
			}
			steps = append(steps, n)
		}
	}
	strat := "drf_cswlc"
	if s := os.Getenv("CLUSTER_SCALE_STRATEGY"); s != "" {
		strat = s
	}
	nodes := newCluster(t, bin)
	led := newLedger()
	subscribe(t, led, nodes[2].mqttAddr(), nodes[1].mqttAddr(), nodes[0].mqttAddr())
	checkStreams(t, nodes[0])
	leader := msgsLeader(t, nodes)
	var proxies [3]*budget
	var addrs []string
	for i, n := range nodes {
		proxies[i] = newBudget(t, n.name, n.mqttAddr(), 0)
		addrs = append(addrs, proxies[i].Addr())
	}
	fleet := newGateways(t, startEmulatorOf(t, farmDevices), strat, addrs, led)
	start := time.Now()
	held := 0
	var lines []string
	for _, n := range steps {
		fleet.add(n - len(fleet.all()))
		testtool.WaitFor(t, 120*time.Second, fmt.Sprintf("%d gateways connected to every node", n), func() bool {
			return minConns(nodes[:]) >= n
		})
		time.Sleep(scaleSettle) // the new gateways settle: a measure, not a synchronisation
		st := measureStep(fleet, proxies, nodes, n)
		lines = append(lines, st.line)
		t.Log(st.line)
		if !st.kept {
			break
		}
		held = n
	}
	if held == 0 {
		t.Errorf("not even %d gateways kept up", steps[0])
	}
	// The restart, at the last size that kept up: the gateways added
	// after it stop polling, deliver what they stored and stop.
	if held > 0 {
		if extra := fleet.all()[held:]; len(extra) > 0 {
			for _, a := range extra {
				a.StopPolling()
			}
			if _, ok := waitCaughtUp(led, time.Now(), catchUpLimit); !ok {
				t.Errorf("the gateways past %d did not deliver what they stored within %v", held, catchUpLimit)
			}
			for _, a := range extra {
				_ = a.Stop()
			}
			testtool.WaitFor(t, 60*time.Second, fmt.Sprintf("%d gateways connected to each node", held), func() bool {
				return maxConns(nodes[:]) <= held+1 // and the platform's subscriber
			})
		}
		lines = append(lines, scaleRestart(t, fleet, nodes, leader, held, strat))
	}
	tot := fleet.drain(t, led, start)
	lines = append(lines, fmt.Sprintf("cluster scale summary: %s held=%d gateways stored=%d lost=%d duplicates=%d", strat, held, tot.stored, tot.lost, tot.duplicates))
	for _, l := range lines {
		fmt.Println(l)
	}
	if tot.lost > 0 {
		t.Errorf("%d packets lost", tot.lost)
	}
}

// scaleStep is one step's figures.
type scaleStep struct {
	kept bool
	line string
}

// measureStep holds the fleet of n gateways scaleHold and says whether it
// kept up.
func measureStep(fleet *gateways, proxies [3]*budget, nodes [3]*node, n int) scaleStep {
	for _, p := range proxies {
		p.measure(true)
	}
	cpu0, nodes0 := selfCPU(), nodesCPU(nodes[:])
	stored0 := fleet.stored.Load()
	del0 := sum(fleet.delivered())
	at := time.Now()
	time.Sleep(scaleHold)
	d := time.Since(at).Seconds()
	stored := float64(fleet.stored.Load()-stored0) / d
	delivered := (sum(fleet.delivered()) - del0) / d
	cpu, nodeCores := (selfCPU()-cpu0)/d, (nodesCPU(nodes[:])-nodes0)/d
	var all []time.Duration
	lost := 0
	for _, p := range proxies {
		all = append(all, p.latencies()...)
		lost += int(p.lost.Load())
		p.measure(false)
	}
	slices.Sort(all)
	p99 := quantileOf(all, 0.99)
	want := float64(n * 7)
	backlog := (stored - delivered) * d // packets the backlog grew by
	kept := stored >= scaleKept*want && delivered >= scaleKept*stored && backlog < want && p99 >= 0 && p99 <= scaleP99
	return scaleStep{kept: kept, line: fmt.Sprintf("cluster scale step: gateways=%d load_1m=%s want_pkt_s=%.0f stored_pkt_s=%.0f delivered_pkt_s=%.0f backlog_growth=%.0f puback_ms=p50:%.1f,p99:%.1f test_cpu_cores=%.2f nodes_cpu_cores=%.2f connections_lost=%d kept_up=%v",
		n, loadAvg(), want, stored, delivered, backlog, ms(quantileOf(all, 0.5)), ms(p99), cpu, nodeCores, lost, kept)}
}

// scaleRestart kills a node that does not lead $MQTT_msgs for 10 s with
// held gateways polling, starts it again and reports the busiest node's
// share, the node's reconnection storm and its share's return.
func scaleRestart(t *testing.T, fleet *gateways, nodes [3]*node, leader, held int, strat string) string {
	type sample struct {
		at    time.Time
		conns int
		del   []float64
	}
	victim := (leader + 1) % 3
	var ss []sample
	read := func() {
		var v struct {
			Connections int `json:"connections"`
		}
		_ = nodes[victim].get("/varz", &v)
		ss = append(ss, sample{time.Now(), v.Connections, fleet.delivered()})
	}
	for range 20 { // 5 s before
		read()
		time.Sleep(250 * time.Millisecond)
	}
	killAt := time.Now()
	nodes[victim].kill()
	for time.Since(killAt) < 10*time.Second {
		read()
		time.Sleep(250 * time.Millisecond)
	}
	nodes[victim].start()
	backAt := time.Now()
	for time.Since(backAt) < 40*time.Second {
		read()
		time.Sleep(250 * time.Millisecond)
	}
	idx := func(t time.Time) int { return slices.IndexFunc(ss, func(s sample) bool { return !s.at.Before(t) }) }
	shares := func(i, j int) ([]float64, float64) {
		per := make([]float64, 3)
		var tot float64
		for n := range 3 {
			per[n] = ss[j].del[n] - ss[i].del[n]
			tot += per[n]
		}
		return per, tot
	}
	busiestDown := 0.0
	if i, j := idx(killAt.Add(2*time.Second)), idx(backAt); i >= 0 && j > i {
		per, tot := shares(i, j)
		if tot > 0 {
			busiestDown = slices.Max(per) / tot * 2
		}
	}
	peak, back6, back90 := 0, -1.0, -1.0
	allBack := -1.0
	for i := idx(backAt); i >= 0 && i < len(ss); i++ {
		if j := idx(ss[i].at.Add(time.Second)); j > 0 {
			peak = max(peak, ss[j].conns-ss[i].conns)
		}
		if allBack < 0 && ss[i].conns >= held {
			allBack = ss[i].at.Sub(backAt).Seconds()
		}
		j := idx(ss[i].at.Add(5 * time.Second))
		if j < 0 {
			break
		}
		per, tot := shares(i, j)
		if tot == 0 {
			continue
		}
		sh := per[victim] / tot
		if back6 < 0 && sh >= 1.0/6 {
			back6 = ss[i].at.Sub(backAt).Seconds()
		}
		if back90 < 0 && sh >= 0.9/3 {
			back90 = ss[i].at.Sub(backAt).Seconds()
		}
	}
	line := fmt.Sprintf("cluster scale restart: %s gateways=%d load_1m=%s restarted=%s busiest_down=%.2f reconnect_peak_per_s=%d all_reconnected_s=%s traffic_back_s=%s share_back_90pct_s=%s",
		strat, held, loadAvg(), nodes[victim].name, busiestDown, peak, orNever(allBack), orNever(back6), orNever(back90))
	t.Log(line)
	return line
}

func orNever(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f", s)
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// minConns is the fewest client connections a node holds (/varz).
func minConns(nodes []*node) int {
	least := -1
	for _, n := range nodes {
		var v struct {
			Connections int `json:"connections"`
		}
		if n.get("/varz", &v) != nil {
			return 0
		}
		if least < 0 || v.Connections < least {
			least = v.Connections
		}
	}
	return least
}

// maxConns is the most client connections a node holds (/varz).
func maxConns(nodes []*node) int {
	most := 0
	for _, n := range nodes {
		var v struct {
			Connections int `json:"connections"`
		}
		if n.get("/varz", &v) == nil {
			most = max(most, v.Connections)
		}
	}
	return most
}

// selfCPU is the CPU seconds this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// nodesCPU is the CPU seconds the nodes' processes have used (/proc).
func nodesCPU(nodes []*node) float64 {
	var s float64
	for _, n := range nodes {
		n.mu.Lock()
		cmd := n.cmd
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime and
		// stime are the 12th and 13th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			k, _ := strconv.ParseFloat(f[12], 64)
			s += (u + k) / 100 // clock ticks (USER_HZ 100)
		}
	}
	return s
}
