//go:build cluster

package cluster

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// phase is one fault: begin starts it, end heals it, hold is how long it
// lasts; faulty are the nodes whose share of the deliveries is reported.
type phase struct {
	name   string
	hold   time.Duration
	faulty []int
	begin  func()
	end    func()
}

// catchUpLimit bounds the wait, after a fault is healed, for every packet
// stored until then to reach the subscriber: a packet missing after it is
// counted lost. It is generous (the gateway's reconnect backoff reaches
// tens of seconds during a long outage) and guards against a hang, not a
// speed.
const catchUpLimit = 90 * time.Second

// clientIDInUse is what the gateway logs when it takes the broker's drops
// for another client connecting with its client id.
const clientIDInUse = "another client uses this gateway's MQTT client id"

func TestCluster(t *testing.T) {
	bin := testtool.RequireSbin(t, "nats-server", "nats-server")
	hold, outage := 15*time.Second, 30*time.Second
	if os.Getenv("CLUSTER_LONG") != "" {
		hold, outage = 60*time.Second, 60*time.Second
	}
	gwBin := buildGateway(t)
	nodes := newCluster(t, bin)
	led := newLedger()

	// The platform: its persistent session is made before the gateway
	// starts, on n3 first; it moves to another node when n3 goes away.
	subscribe(t, led, nodes[2].mqttAddr(), nodes[0].mqttAddr(), nodes[1].mqttAddr())
	checkStreams(t, nodes[0])

	var links [3]*link
	var upstreams []string
	for i, n := range nodes {
		links[i] = newLink(t, n.name, n.mqttAddr())
		upstreams = append(upstreams, links[i].Addr())
	}
	site := siteFile(t, t.TempDir(), startEmulator(t), upstreams)
	gw := startGateway(t, gwBin, site, led)
	start := time.Now()
	testtool.WaitFor(t, 30*time.Second, "the first packet at the subscriber", func() bool {
		_, ok := led.firstArrivalAfter(start)
		return ok
	})

	kill := func(i int) {
		links[i].Down()
		nodes[i].kill()
	}
	restart := func(i int) {
		nodes[i].start()
		links[i].Up()
	}
	var leader int
	phases := []phase{
		{name: "kill", hold: hold, faulty: []int{0},
			begin: func() { kill(0) }, end: func() { restart(0) }},
		{name: "leader-kill", hold: hold,
			begin: func() {
				leader = msgsLeader(t, nodes)
				kill(leader)
			},
			end: func() { restart(leader) }},
		{name: "black-hole", hold: hold, faulty: []int{1},
			begin: func() { links[1].blackHole(true) }, end: func() { links[1].blackHole(false) }},
		{name: "slow-200ms", hold: hold, faulty: []int{0},
			begin: func() { links[0].slow(200 * time.Millisecond) }, end: func() { links[0].slow(0) }},
		// Every packet the slow node gets misses the 1 s mark: the selector
		// must keep traffic off it, and send to it again once it is fast.
		{name: "slow-1200ms", hold: hold, faulty: []int{1},
			begin: func() { links[1].slow(1200 * time.Millisecond) }, end: func() { links[1].slow(0) }},
		{name: "cluster-down", hold: outage, faulty: []int{0, 1, 2},
			begin: func() {
				for i := range nodes {
					kill(i)
				}
			},
			end: func() {
				for i := range nodes {
					restart(i)
				}
			}},
		{name: "mixed", hold: hold, faulty: []int{1, 2},
			begin: func() {
				kill(1)
				links[2].blackHole(true)
				links[0].slow(200 * time.Millisecond)
			},
			end: func() {
				restart(1)
				links[2].blackHole(false)
				links[0].slow(0)
			}},
	}

	var lines []string
	prevEnd := start
	logged := 0 // client id warnings so far
	for _, ph := range phases {
		t0 := time.Now()
		before := deliveredOrFail(t, gw)
		ph.begin()
		if ph.name == "leader-kill" {
			ph.faulty = []int{leader}
			t.Logf("leader-kill: %s leads $MQTT_msgs", nodes[leader].name)
		}
		time.Sleep(ph.hold) // the fault's length: the measure, not a synchronisation
		after := deliveredOrFail(t, gw)
		t1 := time.Now()
		ph.end()
		// When the healed node is sent a packet again (one faulty node
		// only): polled from the gateway's metrics.
		backCh := make(chan time.Duration, 1)
		go func() {
			if len(ph.faulty) != 1 {
				backCh <- -1
				return
			}
			name := "mqtt://" + upstreams[ph.faulty[0]]
			for time.Since(t1) < 30*time.Second {
				if d, err := gw.delivered(); err == nil && d[name] > after[name] {
					backCh <- time.Since(t1)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			backCh <- -1
		}()
		healthy := make(chan time.Time, 1)
		go func() { // when the cluster is whole again, for the log
			for !settled(nodes[:]) && time.Since(t1) < catchUpLimit {
				time.Sleep(50 * time.Millisecond)
			}
			healthy <- time.Now()
		}()

		caught, ok := waitCaughtUp(led, t1, catchUpLimit)
		w := led.window(prevEnd, t1)
		silence := led.longestSilence(t0, caught)
		back := time.Duration(0)
		if a, ok := led.firstArrivalAfter(t1); ok {
			back = a.Sub(t1)
		}
		share := faultyShare(before, after, upstreams, ph.faulty)
		faultyBack := "n/a"
		if d := <-backCh; d >= 0 {
			faultyBack = fmt.Sprintf("%.1f", d.Seconds())
		} else if len(ph.faulty) == 1 {
			faultyBack = "never(30s)"
		}
		line := fmt.Sprintf("cluster %s: hold=%s stored=%d lost=%d duplicates=%d longest_silence_s=%.1f first_after_heal_s=%.1f caught_up_s=%.1f faulty_share=%s faulty_back_s=%s fault_received_within_1s=%.2f%% delivered=%s",
			ph.name, ph.hold, w.stored, w.lost, w.duplicates, silence.Seconds(), back.Seconds(), caught.Sub(t1).Seconds(), share,
			faultyBack, 100*led.within(t0, t1, time.Second), perNode(before, after, upstreams, nodes))
		t.Log(line)
		t.Logf("%s: cluster settled %.1f s after the heal", ph.name, (<-healthy).Sub(t1).Seconds())
		lines = append(lines, line)
		if !ok || w.lost > 0 {
			t.Errorf("%s: %d packets stored before the heal did not reach the subscriber within %v of it", ph.name, w.lost, catchUpLimit)
		}
		// The gateway's three client ids are its own and no other client
		// uses them: a fault of the cluster is no takeover.
		if n := strings.Count(gw.log.String(), clientIDInUse); n > logged {
			t.Errorf("%s: the gateway logged %d times that %q, with no other client on its ids", ph.name, n-logged, clientIDInUse)
			logged = n
		}
		prevEnd = t1
		waitSettled(t, nodes[:])
	}

	// The end: every packet stored until now reaches the subscriber, then
	// the gateway stops; what it stored meanwhile reaches the subscriber or
	// is in its buffer, and the ledger is read whole.
	end := time.Now()
	if _, ok := waitCaughtUp(led, end, catchUpLimit); !ok {
		t.Errorf("%d packets stored before the end did not reach the subscriber within %v", led.missing(start.Add(-time.Hour), end), catchUpLimit)
	}
	inBuffer := gw.stopLeaving(t, led)
	waitCaughtUp(led, time.Now(), 10*time.Second)
	tot := led.totals()
	for _, p := range tot.problems {
		t.Errorf("ledger: %s", p)
	}
	if tot.unknown > 0 {
		t.Errorf("the subscriber received %d packets the gateway never printed", tot.unknown)
	}
	summary := fmt.Sprintf("cluster summary: %s, %d faults in %.0f s: stored=%d received=%d lost=%d left_in_buffer=%d (%d of them unreceived) duplicates=%d out_of_seq_order=%d subscriber_connects=%d",
		nodeVersion(t, bin), len(phases), time.Since(start).Seconds(), tot.stored, tot.received, tot.lost, inBuffer, tot.left, tot.duplicates, tot.outOfOrder, tot.connects)
	for _, l := range append(lines, summary) {
		fmt.Println(l) // the figures, for make cluster-check's grep
	}
	if tot.lost > 0 {
		t.Errorf("%d packets lost (stored by the gateway, never received)", tot.lost)
	}
}

// checkStreams fails the test unless the MQTT streams are replicated on
// all three nodes, and says which retention each has.
func checkStreams(t *testing.T, n *node) {
	t.Helper()
	var ss map[string]streamInfo
	testtool.WaitFor(t, 20*time.Second, "the MQTT streams in /jsz", func() bool {
		var err error
		ss, err = n.streams()
		return err == nil && ss["$MQTT_msgs"].Name != "" && ss["$MQTT_sess"].Name != ""
	})
	for _, name := range []string{"$MQTT_sess", "$MQTT_msgs", "$MQTT_rmsgs"} {
		s, ok := ss[name]
		if !ok {
			continue // $MQTT_rmsgs exists once something is retained
		}
		t.Logf("stream %s: replicas=%d retention=%s leader=%s", name, s.Config.Replicas, s.Config.Retention, s.Cluster.Leader)
		if s.Config.Replicas != 3 {
			t.Fatalf("stream %s has %d replicas, want 3 (one per node)", name, s.Config.Replicas)
		}
	}
}

// msgsLeader is the index of the node that leads $MQTT_msgs.
func msgsLeader(t *testing.T, nodes [3]*node) int {
	t.Helper()
	leader := -1
	testtool.WaitFor(t, 20*time.Second, "a leader of $MQTT_msgs", func() bool {
		for _, n := range nodes {
			ss, err := n.streams()
			if err != nil {
				continue
			}
			for i, m := range nodes {
				if ss["$MQTT_msgs"].Cluster.Leader == m.name {
					leader = i
					return true
				}
			}
		}
		return false
	})
	return leader
}

// waitCaughtUp waits until every packet stored until t reached the
// subscriber, for at most limit; it returns when that happened.
func waitCaughtUp(led *ledger, t time.Time, limit time.Duration) (time.Time, bool) {
	ok := testtool.Eventually(limit, 20*time.Millisecond, func() bool { return led.missing(t.Add(-24*time.Hour), t) == 0 })
	return time.Now(), ok
}

func deliveredOrFail(t *testing.T, gw *gateway) map[string]float64 {
	t.Helper()
	d, err := gw.delivered()
	if err != nil {
		t.Fatalf("gateway metrics: %v", err)
	}
	return d
}

// faultyShare is the faulty nodes' share of the records delivered between
// the two readings of the gateway's metrics.
func faultyShare(before, after map[string]float64, upstreams []string, faulty []int) string {
	var total, bad float64
	for i, u := range upstreams {
		d := after["mqtt://"+u] - before["mqtt://"+u]
		total += d
		for _, f := range faulty {
			if f == i {
				bad += d
			}
		}
	}
	if total == 0 {
		return "n/a(none delivered)"
	}
	return fmt.Sprintf("%.2f", bad/total)
}

// nodeVersion is what nats-server --version says.
func nodeVersion(t *testing.T, bin string) string {
	out, err := execOutput(bin, "--version")
	if err != nil {
		t.Logf("nats-server --version: %v", err)
		return "nats-server ?"
	}
	return strings.TrimSpace(out)
}

// perNode is each node's count of records delivered between the readings.
func perNode(before, after map[string]float64, upstreams []string, nodes [3]*node) string {
	var parts []string
	for i, u := range upstreams {
		parts = append(parts, fmt.Sprintf("%s:%.0f", nodes[i].name, after["mqtt://"+u]-before["mqtt://"+u]))
	}
	return strings.Join(parts, ",")
}
