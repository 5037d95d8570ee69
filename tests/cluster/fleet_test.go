//go:build cluster

package cluster

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/agent"
	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/packet"
	"fieldlink/selector/lab"
	"fieldlink/sensors/profile"
)

// fleetSize is how many gateways TestFleet runs against the cluster.
const fleetSize = 50

// farmDevices are the demo farm's sensors at the demo's intervals: 7
// packets a second per gateway (its valve, polled every second, is left
// out: a fleet's valves are not this test's matter).
var farmDevices = []device{
	{"weather-1", "renke-rs-ws-n01", 1, time.Second},
	{"anemometer-1", "generic-wind-speed", 2, 500 * time.Millisecond},
	{"wind-vane-1", "renke-rs-fxjt-n01", 3, 500 * time.Millisecond},
	{"rain-1", "generic-tipping-bucket-rain", 4, 2 * time.Second},
	{"soil-1", "sensecap-s-soil-mtec-02", 5, 2 * time.Second},
	{"light-1", "dfrobot-sen0644", 6, time.Second},
}

// fleetPlan is the timeline of one strategy's run.
type fleetPlan struct {
	steady, down, after time.Duration
}

// TestFleet runs fleetSize gateways, each a real agent in this process
// (agent.Start on its own site file: its own buffer, its own MQTT
// connection to every node, every uplink setting at its default but the
// selector), at the demo farm's rate against the three nodes, restarts a
// node (one that does not lead $MQTT_msgs), and reports, per strategy: how
// the reconnections to it spread in time, when its connections and its
// share of the traffic came back, the busiest node's rate against the
// fleet's, the nodes' store timeouts, and that nothing was lost. It fails
// on a packet lost, on a gateway not connected to the node again within
// fleetBackWithin of the restart, and on the node not carrying a sixth of
// the traffic (half its share) in some 5 s within fleetBackWithin. For the
// default selector it fails on a missed target too: the busiest node over
// targetSteady times its fair share in steady state, targetDown times
// with a node down or targetDown5s times in any 5 s of it; the restarted
// node not carrying a sixth of the fleet's traffic over a 1 s window ended
// within targetNodeBack (plus targetNodeBackMargin) of accepting MQTT
// connections again (its first CONNACK), or 90% of the fleet not connected
// to it within targetReconnect of its port accepting connections (what a
// node that answers at once needs for the former); the swing of its 1 s
// shares after that over targetSwingBack (an oscillation); and the
// gateways not giving it a sixth of their traffic within targetGatewayBack
// of reconnecting to it (the selector's own part of the return).
//
// make cluster-check runs the short version: drf_cswlc alone, 10 s of
// steady state, the node down 10 s, 30 s after (about a minute). CLUSTER_FLEET=1
// (make cluster-check-fleet, about 4 minutes) runs drf_cswlc, p2c_ewma and
// round_robin with 15 s, 15 s and 45 s and prints a table of the runs
// beside the lab's predictions (S13a); CLUSTER_FLEET_STRATEGIES=a,b picks
// the strategies.
func TestFleet(t *testing.T) {
	bin := testtool.RequireSbin(t, "nats-server", "nats-server")
	// The short version, in make cluster-check: the default selector.
	plan := fleetPlan{steady: 10 * time.Second, down: 10 * time.Second, after: 30 * time.Second}
	if os.Getenv("CLUSTER_FLEET") != "" {
		plan = fleetPlan{steady: 15 * time.Second, down: 15 * time.Second, after: 45 * time.Second}
	}
	var runs []fleetRun
	for _, strat := range fleetStrategies() {
		t.Run(strat, func(t *testing.T) {
			led := newLedger()
			runs = append(runs, runFleet(t, strat, plan, led, natsFleet(t, bin, led)))
		})
	}
	for _, r := range runs {
		fmt.Println(r.line) // the figures, for make's grep
	}
	if os.Getenv("CLUSTER_FLEET") != "" {
		for _, l := range fleetTable(t, runs) {
			fmt.Println(l)
		}
	}
}

// fleetStrategies are the strategies a fleet test runs: the default
// alone, every strategy of the table with CLUSTER_FLEET=1, or those of
// CLUSTER_FLEET_STRATEGIES=a,b.
func fleetStrategies() []string {
	if s := os.Getenv("CLUSTER_FLEET_STRATEGIES"); s != "" {
		return strings.Split(s, ",")
	}
	if os.Getenv("CLUSTER_FLEET") != "" {
		return []string{"drf_cswlc", "p2c_ewma", "round_robin"}
	}
	return []string{config.DefaultSelector}
}

// fleetHeld reports whether strat is held to its fleet's targets: the
// default, and the strategies of CLUSTER_FLEET_HOLD=a,b (a herding one
// there shows that the checks fail).
func fleetHeld(strat string) bool {
	return strat == config.DefaultSelector || slices.Contains(strings.Split(os.Getenv("CLUSTER_FLEET_HOLD"), ","), strat)
}

// fleetLabSeeds is how many seeds of the lab's S13a the table's
// predictions average.
const fleetLabSeeds = 5

// fleetTable sets each run beside the lab's prediction for its strategy in
// S13a, the lab's model of this test (docs/selector-lab.md), one line each
// with "cluster fleet table:" before it for make's grep.
func fleetTable(t *testing.T, runs []fleetRun) []string {
	scs, err := lab.Select([]string{"S13a"})
	if err != nil || len(scs) != 1 {
		t.Fatalf("the lab's S13a: %v", err)
	}
	out := []string{
		"| selector | busiest node, steady (× fair): real / lab | with a node down: real / lab | busiest 5 s with a node down, real | traffic back (s): real / lab | after each gateway's reconnection (s), real | swing of 1 s shares, real / lab |",
		"|---|---|---|---|---|---|---|",
	}
	for _, r := range runs {
		var steady, down, back, swing float64
		never := 0
		for seed := range uint64(fleetLabSeeds) {
			tr, err := lab.Simulate(scs[0], r.strat, seed+1)
			if err != nil {
				t.Fatalf("lab: %v", err)
			}
			steady += tr.BusiestSteady / fleetLabSeeds
			down += tr.BusiestDown / fleetLabSeeds
			swing += tr.Swing / fleetLabSeeds
			if math.IsInf(tr.Back, 1) {
				never++
			} else {
				back += tr.Back
			}
		}
		labBack := "never"
		if never < fleetLabSeeds {
			labBack = fmt.Sprintf("%.1f", back/float64(fleetLabSeeds-never))
			if never > 0 {
				labBack += fmt.Sprintf(" (%d of %d never)", never, fleetLabSeeds)
			}
		}
		out = append(out, fmt.Sprintf("| `%s` | %.2f / %.2f | %.2f / %.2f | %.2f | %s / %s | %s | %.2f / %.2f |",
			r.strat, r.f.busiestSteady, steady, r.f.busiestDown, down, r.f.busiestDown5s, secs(r.f.trafficBack), labBack, secs(r.f.gatewayBack), r.f.swing, swing))
	}
	for k := range out {
		out[k] = "cluster fleet table: " + out[k]
	}
	return out
}

// fleetBackWithin bounds the return of the restarted node.
const fleetBackWithin = 40 * time.Second

// fleetSample is one reading of the nodes and the fleet.
type fleetSample struct {
	at        time.Time
	conns     [3]int     // client connections per node (/varz)
	delivered [3]float64 // records acknowledged per node, over the fleet
	// Per gateway: records acknowledged per node, and whether its
	// connection to each node is up.
	gw []fleetGateway
}

// fleetGateway is one gateway's part of a sample.
type fleetGateway struct {
	delivered [3]float64
	up        [3]bool
}

// fleetBrokers are the three brokers a fleet delivers to, as runFleet
// drives them: a NATS cluster's nodes (natsFleet) or independent brokers
// (mosquittoFleet). The platform's subscriber is theirs to start.
type fleetBrokers struct {
	kind  string    // the figures line's word: "fleet" or "brokers fleet"
	addrs [3]string // MQTT host:port
	names [3]string
	// conns is the broker's own count of client connections, when it
	// reports one; nil: the gateways' count of their connections to it.
	conns func(i int) (int, bool)
	// pick chooses the broker to restart, after the steady state; leader
	// is the broker that leads the stream, -1 if none.
	pick        func() (victim, leader int)
	kill, start func(i int)
	stalls      func() int // publishes a broker could not store in time
	targets     fleetTargets
}

// fleetTargets are what the default selector is held to on a fleet's
// brokers (docs/cluster.md): the busiest broker's share over its fair
// share in steady state, with a broker down and in any 5 s of that; the
// restarted broker's return counted from its first CONNACK (a NATS node
// holds it until its JetStream is back) or, fromAccept, from its port
// accepting connections (a broker that answers at once).
type fleetTargets struct {
	steady, down, down5s float64
	fromAccept           bool
}

// natsFleet is the three-node NATS cluster of the tier, the platform's
// subscriber on it (one session, failing over between nodes) recording
// into led.
func natsFleet(t *testing.T, bin string, led *ledger) fleetBrokers {
	nodes := newCluster(t, bin)
	subscribe(t, led, nodes[2].mqttAddr(), nodes[1].mqttAddr(), nodes[0].mqttAddr())
	checkStreams(t, nodes[0])
	b := fleetBrokers{
		kind: "fleet",
		conns: func(i int) (int, bool) {
			var v struct {
				Connections int `json:"connections"`
			}
			return v.Connections, nodes[i].get("/varz", &v) == nil
		},
		// The node restarted is one that does not lead $MQTT_msgs: the
		// leader's death costs an election, which TestCluster measures.
		pick: func() (int, int) {
			leader := msgsLeader(t, nodes)
			return (leader + 1) % len(nodes), leader
		},
		kill:  func(i int) { nodes[i].kill() },
		start: func(i int) { nodes[i].start() },
		stalls: func() (n int) {
			for _, nd := range nodes {
				n += strings.Count(nd.log.String(), "timeout for request type")
			}
			return n
		},
		targets: fleetTargets{steady: targetSteady, down: targetDown, down5s: targetDown5s},
	}
	for i, n := range nodes {
		b.addrs[i], b.names[i] = n.mqttAddr(), n.name
	}
	return b
}

// runFleet runs fleetSize gateways with the selector strat against the
// brokers b, whose subscriber records into led, and restarts one.
func runFleet(t *testing.T, strat string, plan fleetPlan, led *ledger, b fleetBrokers) fleetRun {
	bus := startEmulatorOf(t, farmDevices)
	profiles := func(string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, "") }

	names := make([]string, 3)
	for i, a := range b.addrs {
		names[i] = "mqtt://" + a
	}
	var gws []*agent.Agent
	for i := range fleetSize {
		c := fleetSite(t, i, bus, strat, b.addrs, profiles)
		g, err := agent.Start(c, agent.Options{
			Logger:   slog.New(slog.DiscardHandler),
			OnPacket: func(p *packet.Packet) { led.storedPacket(p, time.Now()) },
		})
		if err != nil {
			t.Fatalf("gateway %d: %v", i, err)
		}
		gws = append(gws, g)
	}
	stopped := false
	stopAll := func() {
		if stopped {
			return
		}
		stopped = true
		var wg sync.WaitGroup
		for _, g := range gws {
			wg.Go(func() { _ = g.Stop() })
		}
		wg.Wait()
	}
	t.Cleanup(stopAll)

	// Sample every 250 ms until the end.
	var (
		mu      sync.Mutex
		samples []fleetSample
		done    = make(chan struct{})
		sampled = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			s := fleetSample{at: time.Now()}
			if b.conns != nil {
				for i := range b.addrs {
					if n, ok := b.conns(i); ok {
						s.conns[i] = n
					}
				}
			}
			s.gw = make([]fleetGateway, len(gws))
			for k, g := range gws {
				st, _ := g.Delivery()
				for _, u := range st.Upstreams {
					if i := slices.Index(names, u.Name); i >= 0 {
						s.delivered[i] += float64(u.Delivered)
						s.gw[k].delivered[i] = float64(u.Delivered)
						s.gw[k].up[i] = u.DownSince.IsZero()
						if b.conns == nil && s.gw[k].up[i] {
							s.conns[i]++
						}
					}
				}
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()

	start := time.Now()
	testtool.WaitFor(t, 60*time.Second, "every gateway connected to every node", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(samples) == 0 {
			return false
		}
		s := samples[len(samples)-1]
		return s.conns[0] >= fleetSize && s.conns[1] >= fleetSize && s.conns[2] >= fleetSize
	})
	connectedIn := time.Since(start)
	time.Sleep(plan.steady) // the fleet's steady state: a measure, not a synchronisation
	victim, leader := b.pick()
	killAt := time.Now()
	b.kill(victim)
	time.Sleep(plan.down)
	b.start(victim)
	backAt := time.Now()
	answered := make(chan time.Time, 1)
	go func() { answered <- firstCONNACK(b.addrs[victim], backAt.Add(plan.after)) }()
	time.Sleep(plan.after)
	answerAt := <-answered
	close(done)
	<-sampled
	// The gateways stop polling; every packet they stored reaches the
	// subscriber while they still deliver (a stopped gateway keeps its
	// backlog), then they stop.
	for _, g := range gws {
		g.StopPolling()
	}
	end := time.Now()
	if _, ok := waitCaughtUp(led, end, catchUpLimit); !ok {
		t.Errorf("%d packets stored did not reach the subscriber within %v of the end", led.missing(start.Add(-time.Hour), end), catchUpLimit)
	}
	stopAll()
	tot := led.totals()
	stalls := b.stalls() // publishes a node could not store in time (it then closes the publisher)
	for _, p := range tot.problems {
		t.Errorf("ledger: %s", p)
	}

	mu.Lock()
	defer mu.Unlock()
	f := fleetFigures(samples, victim, killAt, backAt, answerAt, plan)
	leaderName := "none"
	if leader >= 0 {
		leaderName = b.names[leader]
	}
	line := fmt.Sprintf("cluster %s %s: load=%s gateways=%d restarted=%s leader=%s rate_pkt_s=%.0f connected_all_s=%.1f reconnect_s=p10:%s,p50:%s,p90:%s,all:%s reconnect_peak_per_s=%d gateways_up_s=p10:%s,p50:%s,p90:%s,all:%s traffic_back_s=%s connack_after_accept_s=%s node_back_1s_s=%s(from_accept %s) swing_back=%.2f gateway_back_s=%s share_before=%.2f share_last10s=%.2f busiest_steady=%.2f busiest_down=%.2f busiest_down_5s=%.2f swing=%.2f busiest_node_pkt_s=%.0f(fleet %.0f) node_store_timeouts=%d stored=%d lost=%d duplicates=%d",
		b.kind, strat, loadAvg(), fleetSize, b.names[victim], leaderName, f.rate, connectedIn.Seconds(), secs(f.reconnect[0]), secs(f.reconnect[1]), secs(f.reconnect[2]), secs(f.reconnect[3]),
		f.peakPerSecond, secs(f.up[0]), secs(f.up[1]), secs(f.up[2]), secs(f.up[3]), secs(f.trafficBack), secs(f.answered), secs(f.nodeBack), secs(f.nodeBackAccept), f.swingBack, secs(f.gatewayBack), f.shareBefore, f.shareLast, f.busiestSteady, f.busiestDown, f.busiestDown5s, f.swing, f.busiest, f.busiestFleet, stalls, tot.stored, tot.lost, tot.duplicates)
	t.Log(line)
	t.Logf("%s: %s's shares of 1 s windows from its first CONNACK: %.2f", strat, b.names[victim], f.sharesBack)
	if fleetHeld(strat) {
		// The default's targets (docs/cluster.md, "Fifty gateways and a
		// node restarted"): the fleet spread, not herded on one broker.
		tg := b.targets
		if f.busiestSteady > tg.steady || f.busiestDown > tg.down || f.busiestDown5s > tg.down5s {
			t.Errorf("%s: the busiest broker took %.2f× its fair share in steady state, %.2f× with one down and %.2f× in the busiest 5 s of it, want at most %.2f×, %.2f× and %.2f×",
				strat, f.busiestSteady, f.busiestDown, f.busiestDown5s, tg.steady, tg.down, tg.down5s)
		}
		back, from := f.nodeBack, fmt.Sprintf("its first CONNACK, %s s after its port accepted", secs(f.answered))
		if tg.fromAccept {
			back, from = f.nodeBackAccept, fmt.Sprintf("its port; its first CONNACK %s s after", secs(f.answered))
		}
		if back < 0 || back > targetNodeBack+targetNodeBackMargin {
			t.Errorf("%s: %s carried a sixth of the fleet's traffic over 1 s %s s after it accepted MQTT connections again (%s), want within %v (%v with the margin for a shared machine; %d gateways connected to it again 1 s after its port accepted, %d after 2 s)",
				strat, b.names[victim], secs(back), from, targetNodeBack, targetNodeBack+targetNodeBackMargin, f.reconnectedBy[0], f.reconnectedBy[1])
		}
		if f.reconnect[2] < 0 || f.reconnect[2] > targetReconnect {
			t.Errorf("%s: 90%% of the fleet connected to %s again %s s after its port accepted connections, want within %v (all: %s s), so that a node answering at once carries its sixth within %v",
				strat, b.names[victim], secs(f.reconnect[2]), targetReconnect, secs(f.reconnect[3]), targetNodeBack)
		}
		if f.swingBack > targetSwingBack {
			t.Errorf("%s: %s's share of 1 s windows swung over %.2f once back (5th to 95th percentile), want at most %.2f", strat, b.names[victim], f.swingBack, targetSwingBack)
		}
		if f.gatewayBack < 0 || f.gatewayBack > targetGatewayBack {
			t.Errorf("%s: the gateways sent %s a sixth of their traffic %s s after they reconnected to it, want within %v", strat, b.names[victim], secs(f.gatewayBack), targetGatewayBack)
		}
	}
	if tot.lost > 0 {
		t.Errorf("%d packets lost", tot.lost)
	}
	if f.reconnect[3] < 0 || f.reconnect[3] > fleetBackWithin {
		t.Errorf("not every gateway connected to %s again within %v of its restart (all: %s)", b.names[victim], fleetBackWithin, secs(f.reconnect[3]))
	}
	if f.trafficBack < 0 || f.trafficBack > fleetBackWithin {
		t.Errorf("%s did not carry a sixth of the traffic in any 5 s within %v of its restart (%s)", b.names[victim], fleetBackWithin, secs(f.trafficBack))
	}
	return fleetRun{strat: strat, line: line, f: f}
}

// fleetRun is one strategy's run: its figures line and its figures.
type fleetRun struct {
	strat string
	line  string
	f     fleetResult
}

// fleetSite parses the site file of gateway i: the farm's devices on bus,
// one upstream per broker, the selector strat.
func fleetSite(t *testing.T, i int, bus, strat string, addrs [3]string, profiles config.ProfileSource) *config.Config {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "site: {id: \"FLEET\", id_field: FarmId}\ngateway: {id: gw-fleet-%02d}\nmetrics: {listen: \"off\"}\n", i)
	fmt.Fprintf(&b, "buses:\n  - name: field\n    url: tcp://%s\n    timeout: 300ms\n    devices:\n", bus)
	for _, d := range farmDevices {
		fmt.Fprintf(&b, "      - {name: %s, profile: %s, slave: %d, interval: %v}\n", d.name, d.profile, d.slave, d.interval)
	}
	fmt.Fprintf(&b, "buffer: {path: %s, durability: interval, sync_every: 200ms}\n", filepath.Join(dir, "buffer.db"))
	fmt.Fprintf(&b, "uplink:\n  selector: %s\n  upstreams:\n", strat)
	for _, a := range addrs {
		fmt.Fprintf(&b, "    - {url: \"mqtt://%s\"}\n", a)
	}
	path := filepath.Join(dir, "site.yaml")
	c, err := config.Parse(path, []byte(b.String()), profiles)
	if err != nil {
		t.Fatalf("site of gateway %d: %v", i, err)
	}
	return c
}

// fleetResult are one run's figures.
type fleetResult struct {
	rate          float64          // the fleet's packets a second, before the kill
	reconnect     [4]time.Duration // after the restart, the node holds 10%, 50%, 90%, all of the fleet's connections; -1: never
	peakPerSecond int              // most connections the node gained in one second
	trafficBack   time.Duration    // the node carries a sixth of the traffic over 5 s, from the restart; -1: never
	shareBefore   float64          // the node's share before the kill
	shareLast     float64          // the node's share over the last 10 s
	busiest       float64          // the busiest node's highest rate over 5 s, after the kill
	busiestFleet  float64          // the fleet's rate over the same 5 s
	// The busiest node's share of the traffic over its fair share: in
	// steady state (of three) and from 2 s after the kill to the restart
	// (of two); busiestDown5s is the highest over 5 s within the latter.
	busiestSteady, busiestDown, busiestDown5s float64
	// swing is the widest band of one node's shares of 1 s windows in
	// steady state, 5th to 95th percentile.
	swing float64
	// answered is from the node's MQTT port accepting TCP connections
	// again to its first CONNACK (a restarted NATS node holds its MQTT
	// clients' CONNACKs until its JetStream is back); -1: never.
	answered time.Duration
	// nodeBack is from that first CONNACK, the node accepting MQTT
	// connections again, to the end of the first 1 s window, in 250 ms
	// steps from it, over which the node carries a sixth of the fleet's
	// traffic (half its share); nodeBackAccept the same from its port
	// accepting TCP connections; -1: never.
	nodeBack, nodeBackAccept time.Duration
	// reconnectedBy are how many gateways were connected to the node
	// again 1 s and 2 s after its return, and up are when 10%, 50%, 90%
	// and all of them were, from its return: their own view (CONNACK,
	// subscriptions and the retained "online" acknowledged), which comes
	// later than the node's count of connections.
	reconnectedBy [2]int
	up            [4]time.Duration
	// swingBack is the band of the node's shares of 1 s windows from
	// nodeBack+fleetSettle to the end, 5th to 95th percentile: an
	// oscillation once back widens it. sharesBack are its shares of 1 s
	// windows from its first CONNACK, for the log.
	swingBack  float64
	sharesBack []float64
	// gatewayBack is the selector's own return to the node, without the
	// reconnections' spread: from each gateway's reconnection, the traffic
	// of every gateway pooled, the first 250 ms step from which the node
	// has a sixth of it over 1 s; -1: never.
	gatewayBack time.Duration
}

// Targets of the default selector (docs/cluster.md): the busiest node's
// share over its fair share, steady and with a node down; the restarted
// node's return (the whole fleet's), the reconnections it needs and its
// swing after; and the selector's return from each gateway's reconnection.
//
// The return is counted from the node's first CONNACK, not from its port
// accepting connections: a restarted NATS node holds its MQTT clients'
// CONNACKs until its JetStream is back, 1.2–9.6 s after its port opened
// in eight runs here, which no client can shorten. targetNodeBack is the
// target; the check allows targetNodeBackMargin more, for a test process
// running 50 gateways beside three nodes on a shared 2-core machine.
// targetReconnect (90% of the fleet connected from the port's opening)
// is what a node that answers at once needs to carry a sixth within
// targetNodeBack: about a second of reconnections, half a second of the
// slow start for a gateway's draw to give it a sixth, and the 1 s window;
// it has the same margin. targetSwingBack bounds the node's 1 s shares
// from fleetSettle after it carries a sixth, 5th to 95th percentile: the
// steady state's band is 0.11–0.28 (round robin's, which cannot
// oscillate, 0.23–0.32: deliveries are counted per acknowledgement and
// read every 250 ms), a fleet swinging between leaving the node and
// herding on it would pass 0.5.
//
// The target with a node down is 1.25×, and the default met it in every
// run measured (1.04–1.20×), but too close to hold on a shared machine
// every time: the tier fails at 1.35×. targetDown5s catches a herd that
// the average over the node's absence hides (1.44× and 1.47× over 5 s
// where the average was 1.12×, before the fleet pick); the spread default
// reached 1.24× over 5 s in one of five runs.
const (
	targetSteady      = 1.5
	targetDown        = 1.35
	targetDown5s      = 1.4
	targetGatewayBack = 2 * time.Second

	targetNodeBack       = 2 * time.Second
	targetNodeBackMargin = 500 * time.Millisecond
	targetReconnect      = time.Second + targetNodeBackMargin
	targetSwingBack      = 0.4
)

// firstCONNACK connects to addr, again every 20 ms after a failure, until
// a connection is accepted (its CONNACK came) or until, and returns when;
// zero if never.
func firstCONNACK(addr string, until time.Time) time.Time {
	for n := 0; time.Now().Before(until); n++ {
		c, err := brokertest.Dial(brokertest.Options{ID: fmt.Sprintf("fleet-answer-%d", n), Brokers: []string{addr}, ConnectTimeout: 10 * time.Second, Wait: 10 * time.Second})
		if err == nil {
			at := time.Now()
			c.Close()
			return at
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Time{}
}

// fleetSettle is how long after the restarted node carries a sixth its
// swing starts to count: the gateways' warm-up (3 s) is a rise, not a
// swing.
const fleetSettle = 3 * time.Second

func fleetFigures(ss []fleetSample, v int, killAt, backAt, answerAt time.Time, plan fleetPlan) fleetResult {
	r := fleetResult{reconnect: [4]time.Duration{-1, -1, -1, -1}, trafficBack: -1, answered: -1}
	if !answerAt.IsZero() {
		r.answered = answerAt.Sub(backAt)
	}
	// rateOver is each node's records a second over (a, b].
	rateOver := func(a, b time.Time) (per [3]float64, total float64) {
		i := slices.IndexFunc(ss, func(s fleetSample) bool { return !s.at.Before(a) })
		j := slices.IndexFunc(ss, func(s fleetSample) bool { return !s.at.Before(b) })
		if i < 0 || j < 0 || j <= i {
			return per, 0
		}
		d := ss[j].at.Sub(ss[i].at).Seconds()
		for n := range 3 {
			per[n] = (ss[j].delivered[n] - ss[i].delivered[n]) / d
			total += per[n]
		}
		return per, total
	}
	share := func(a, b time.Time) float64 {
		per, total := rateOver(a, b)
		if total == 0 {
			return 0
		}
		return per[v] / total
	}
	_, r.rate = rateOver(killAt.Add(-plan.steady+2*time.Second), killAt)
	r.shareBefore = share(killAt.Add(-plan.steady+2*time.Second), killAt)
	last := ss[len(ss)-1].at
	r.shareLast = share(last.Add(-10*time.Second), last)
	marks := [4]int{(fleetSize + 9) / 10, fleetSize / 2, fleetSize * 9 / 10, fleetSize}
	for _, s := range ss {
		if s.at.Before(backAt) {
			continue
		}
		for k, m := range marks {
			if r.reconnect[k] < 0 && s.conns[v] >= m {
				r.reconnect[k] = s.at.Sub(backAt)
			}
		}
	}
	for i, s := range ss {
		if s.at.Before(backAt) {
			continue
		}
		j := slices.IndexFunc(ss[i:], func(o fleetSample) bool { return !o.at.Before(s.at.Add(time.Second)) })
		if j < 0 {
			break
		}
		r.peakPerSecond = max(r.peakPerSecond, ss[i+j].conns[v]-s.conns[v])
		if r.trafficBack < 0 && share(s.at, s.at.Add(5*time.Second)) >= 1.0/6 {
			r.trafficBack = s.at.Sub(backAt)
		}
	}
	for _, s := range ss {
		if s.at.Before(killAt) {
			continue
		}
		per, total := rateOver(s.at, s.at.Add(5*time.Second))
		for n := range 3 {
			if per[n] > r.busiest {
				r.busiest, r.busiestFleet = per[n], total
			}
		}
	}
	busiest := func(a, b time.Time, fair float64) float64 {
		per, total := rateOver(a, b)
		if total == 0 {
			return 0
		}
		return slices.Max(per[:]) / total / fair
	}
	steadyFrom := killAt.Add(-plan.steady + 2*time.Second)
	r.busiestSteady = busiest(steadyFrom, killAt, 1.0/3)
	r.busiestDown = busiest(killAt.Add(2*time.Second), backAt, 1.0/2)
	for _, s := range ss {
		if a := killAt.Add(2 * time.Second); s.at.Before(a) || s.at.Add(5*time.Second).After(backAt) {
			continue
		}
		r.busiestDown5s = max(r.busiestDown5s, busiest(s.at, s.at.Add(5*time.Second), 1.0/2))
	}
	for n := range 3 {
		var sh []float64
		for a := steadyFrom; !a.Add(time.Second).After(killAt); a = a.Add(time.Second) {
			if per, total := rateOver(a, a.Add(time.Second)); total > 0 {
				sh = append(sh, per[n]/total)
			}
		}
		if len(sh) > 0 {
			slices.Sort(sh)
			r.swing = max(r.swing, sh[len(sh)*95/100]-sh[len(sh)*5/100])
		}
	}
	r.gatewayBack = gatewayBack(ss, v, backAt)
	r.nodeBack, r.nodeBackAccept = -1, -1
	for a := backAt; !a.Add(time.Second).After(last); a = a.Add(250 * time.Millisecond) {
		if share(a, a.Add(time.Second)) >= 1.0/6 {
			r.nodeBackAccept = a.Add(time.Second).Sub(backAt)
			break
		}
	}
	if r.answered >= 0 {
		for a := answerAt; !a.Add(time.Second).After(last); a = a.Add(250 * time.Millisecond) {
			if share(a, a.Add(time.Second)) >= 1.0/6 {
				r.nodeBack = a.Add(time.Second).Sub(answerAt)
				break
			}
		}
	}
	r.up = [4]time.Duration{-1, -1, -1, -1}
	for _, s := range ss {
		if s.at.Before(backAt) {
			continue
		}
		n := 0
		for _, g := range s.gw {
			if g.up[v] {
				n++
			}
		}
		for k, m := range marks {
			if r.up[k] < 0 && n >= m {
				r.up[k] = s.at.Sub(backAt)
			}
		}
	}
	for k, by := range []time.Duration{time.Second, 2 * time.Second} {
		i := slices.IndexFunc(ss, func(s fleetSample) bool { return !s.at.Before(backAt.Add(by)) })
		if i < 0 {
			continue
		}
		for _, g := range ss[i].gw {
			if g.up[v] {
				r.reconnectedBy[k]++
			}
		}
	}
	if r.answered >= 0 {
		for a := answerAt; !a.Add(time.Second).After(last); a = a.Add(time.Second) {
			r.sharesBack = append(r.sharesBack, share(a, a.Add(time.Second)))
		}
	}
	if r.nodeBack >= 0 {
		var sh []float64
		for a := answerAt.Add(r.nodeBack + fleetSettle); !a.Add(time.Second).After(last); a = a.Add(time.Second) {
			if per, total := rateOver(a, a.Add(time.Second)); total > 0 {
				sh = append(sh, per[v]/total)
			}
		}
		if len(sh) > 0 {
			slices.Sort(sh)
			r.swingBack = sh[len(sh)*95/100] - sh[len(sh)*5/100]
		}
	}
	return r
}

// gatewayBack is fleetResult.gatewayBack.
func gatewayBack(ss []fleetSample, v int, backAt time.Time) time.Duration {
	at := func(t time.Time) int {
		return slices.IndexFunc(ss, func(s fleetSample) bool { return !s.at.Before(t) })
	}
	recon := make([]time.Time, len(ss[len(ss)-1].gw)) // each gateway's reconnection to v; zero: none
	for k := range recon {
		for _, s := range ss {
			if !s.at.Before(backAt) && k < len(s.gw) && s.gw[k].up[v] {
				recon[k] = s.at
				break
			}
		}
	}
	for tau := time.Duration(0); tau <= 20*time.Second; tau += 250 * time.Millisecond {
		var got, all float64
		for k, r := range recon {
			if r.IsZero() {
				continue
			}
			i, j := at(r.Add(tau)), at(r.Add(tau+time.Second))
			if i < 0 || j < 0 {
				continue
			}
			for n := range 3 {
				d := ss[j].gw[k].delivered[n] - ss[i].gw[k].delivered[n]
				all += d
				if n == v {
					got += d
				}
			}
		}
		if all > 0 && got/all >= 1.0/6 {
			return tau
		}
	}
	return -1
}

func secs(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f", d.Seconds())
}
