//go:build cluster

package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// rabbitQueue is the platform subscriber's queue: RabbitMQ's MQTT plugin
// keeps a persistent session's QoS 1 subscriptions in
// mqtt-subscription-<client id>qos1.
const rabbitQueue = "mqtt-subscription-fieldlink-cluster-platformqos1"

// TestRabbit runs the gateway against a second clustered engine: three
// rabbitmq-server nodes (Debian's 3.10) with the MQTT plugin, persistent
// sessions' queues quorum queues, through toxiproxy as in TestCluster,
// while a node, then the subscriber queue's leader, then the whole cluster
// are killed and started again. It fails on any packet the gateway stored
// that the persistent subscriber never received, and prints one figures
// line per fault. Its nodes take about a minute to boot and join, and
// each fault holds a minute: it runs in make cluster-check-long
// (CLUSTER_LONG=1) only.
func TestRabbit(t *testing.T) {
	if os.Getenv("CLUSTER_LONG") == "" {
		t.Skip("RabbitMQ's cluster runs in make cluster-check-long (CLUSTER_LONG=1)")
	}
	hold := time.Minute
	gwBin := buildGateway(t)
	rmq := testtool.StartRabbitMQ(t, 3, "mqtt.durable_queue_type = quorum")
	nodes := rmq.Nodes
	for _, n := range nodes {
		t.Cleanup(func() { keepLog(t, n.Name+".log", n.Log()) })
	}
	led := newLedger()

	// The platform's persistent session, on rabbit3 first; it moves to
	// another node when rabbit3 goes away.
	subscribe(t, led, nodes[2].MQTTAddr(), nodes[0].MQTTAddr(), nodes[1].MQTTAddr())
	q := waitQueue(t, nodes[0], "the subscriber's queue", func(q rabbitQueueInfo) bool { return q.Name != "" })
	t.Logf("queue %s: type=%s leader=%s members=%v", q.Name, q.Type, q.Leader, q.Members)
	if q.Type != "quorum" || len(q.Members) != 3 {
		t.Fatalf("queue %s: type %s with %d members, want a quorum queue on all 3 nodes (mqtt.durable_queue_type = quorum)", q.Name, q.Type, len(q.Members))
	}

	var links []*link
	var upstreams, names []string
	for _, n := range nodes {
		name := strings.TrimSuffix(n.Name, "@localhost")
		l := newLink(t, name, n.MQTTAddr())
		links = append(links, l)
		upstreams = append(upstreams, l.Addr())
		names = append(names, name)
	}
	site := siteFile(t, t.TempDir(), startEmulator(t), upstreams)
	gw := startGateway(t, gwBin, site, led)
	start := time.Now()
	testtool.WaitFor(t, 30*time.Second, "the first packet at the subscriber", func() bool {
		_, ok := led.firstArrivalAfter(start)
		return ok
	})

	kill := func(i ...int) {
		for _, i := range i {
			links[i].Down()
			nodes[i].Kill()
		}
	}
	// restart boots the nodes at once and brings their links up, in the
	// background: the channel says how long the boot took, or why it
	// failed.
	type booted struct {
		took time.Duration
		err  error
	}
	restart := func(i ...int) <-chan booted {
		ch := make(chan booted, 1)
		go func() {
			t0 := time.Now()
			var ns []*testtool.RabbitNode
			for _, i := range i {
				ns = append(ns, nodes[i])
			}
			if err := rmq.Restart(ns...); err != nil {
				ch <- booted{err: err}
				return
			}
			for _, i := range i {
				links[i].Up()
			}
			ch <- booted{took: time.Since(t0)}
		}()
		return ch
	}
	leaderOf := func() int {
		q := waitQueue(t, nodes[0], "a leader of the subscriber's queue", func(q rabbitQueueInfo) bool { return q.Leader != "" })
		for i, n := range nodes {
			if n.Name == q.Leader {
				return i
			}
		}
		t.Fatalf("queue %s: leader %s is no node of the cluster", q.Name, q.Leader)
		return -1
	}
	leader := leaderOf()
	other := (leader + 1) % 3 // a node that leads nothing of the subscriber's
	phases := []struct {
		name   string
		faulty []int
	}{
		{"kill", []int{other}},
		{"leader-kill", nil}, // the leader at the time
		{"cluster-down", []int{0, 1, 2}},
	}

	var lines []string
	prevEnd := start
	for _, ph := range phases {
		if ph.faulty == nil {
			ph.faulty = []int{leaderOf()}
		}
		t.Logf("%s: killing %v", ph.name, ph.faulty)
		t0 := time.Now()
		before := deliveredOrFail(t, gw)
		kill(ph.faulty...)
		time.Sleep(hold) // the fault's length: the measure, not a synchronisation
		after := deliveredOrFail(t, gw)
		t1 := time.Now()
		bootCh := restart(ph.faulty...)
		// The boot is part of the wait: all of it when the whole cluster
		// is down.
		caught, ok := waitCaughtUp(led, t1, testtool.RabbitBootLimit+catchUpLimit)
		boot := <-bootCh
		if boot.err != nil {
			t.Fatalf("%s: %v", ph.name, boot.err)
		}
		w := led.window(prevEnd, t1)
		back := time.Duration(-1)
		if a, ok := led.firstArrivalAfter(t1); ok {
			back = a.Sub(t1)
		}
		var per []string
		for i, u := range upstreams {
			per = append(per, fmt.Sprintf("%s:%.0f", names[i], after["mqtt://"+u]-before["mqtt://"+u]))
		}
		line := fmt.Sprintf("cluster rabbitmq %s: hold=%s stored=%d delivered_to_subscriber=%d lost=%d duplicates=%d longest_silence_s=%.1f node_boot_s=%.1f first_after_heal_s=%.1f caught_up_s=%.1f faulty_share=%s delivered=%s",
			ph.name, hold, w.stored, w.stored-w.lost, w.lost, w.duplicates, led.longestSilence(t0, caught).Seconds(), boot.took.Seconds(), back.Seconds(),
			caught.Sub(t1).Seconds(), faultyShare(before, after, upstreams, ph.faulty), strings.Join(per, ","))
		t.Log(line)
		lines = append(lines, line)
		if !ok || w.lost > 0 {
			t.Errorf("%s: %d packets stored before the heal did not reach the subscriber within %v of it", ph.name, w.lost, testtool.RabbitBootLimit+catchUpLimit)
		}
		prevEnd = t1
		// The next fault starts on a whole cluster: the queue's three
		// members online again.
		waitQueue(t, nodes[0], "the subscriber's queue's 3 members online", func(q rabbitQueueInfo) bool { return len(q.Online) == 3 && q.Leader != "" })
	}

	end := time.Now()
	if _, ok := waitCaughtUp(led, end, catchUpLimit); !ok {
		t.Errorf("%d packets stored before the end did not reach the subscriber within %v", led.missing(start.Add(-time.Hour), end), catchUpLimit)
	}
	// What the gateway stored after the end, while it was waited for, may
	// be on its way at the stop: it is given a while to arrive, and what
	// did not must be in the buffer for the next start, not lost.
	gw.stopLeaving(t, led)
	waitCaughtUp(led, time.Now(), 30*time.Second)
	tot := led.totals()
	for _, p := range tot.problems {
		t.Errorf("ledger: %s", p)
	}
	if tot.unknown > 0 {
		t.Errorf("the subscriber received %d packets the gateway never printed", tot.unknown)
	}
	version, _ := nodes[0].Ctl("version")
	summary := fmt.Sprintf("cluster rabbitmq summary: RabbitMQ %s, %d faults in %.0f s: stored=%d received=%d lost=%d left_at_stop=%d duplicates=%d out_of_seq_order=%d subscriber_connects=%d client_id_warnings=%d",
		strings.TrimSpace(version), len(phases), time.Since(start).Seconds(), tot.stored, tot.received, tot.lost, tot.left, tot.duplicates, tot.outOfOrder, tot.connects,
		strings.Count(gw.log.String(), clientIDInUse))
	for _, l := range append(lines, summary) {
		fmt.Println(l) // the figures, for make cluster-check's grep
	}
	if tot.lost > 0 {
		t.Errorf("%d packets lost (stored by the gateway, never received)", tot.lost)
	}
}

// rabbitQueueInfo is what rabbitmqctl list_queues says of a queue.
type rabbitQueueInfo struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Online  []string `json:"online"`
}

// waitQueue waits, for at most 2 minutes, until the subscriber's queue as
// node n sees it satisfies cond, and returns it.
func waitQueue(t *testing.T, n *testtool.RabbitNode, what string, cond func(rabbitQueueInfo) bool) rabbitQueueInfo {
	t.Helper()
	var q rabbitQueueInfo
	var last string
	ok := testtool.Eventually(2*time.Minute, 500*time.Millisecond, func() bool {
		out, err := n.Ctl("list_queues", "--formatter", "json", "name", "type", "leader", "members", "online")
		last = out
		if err != nil {
			return false
		}
		var qs []rabbitQueueInfo
		if json.Unmarshal([]byte(out), &qs) != nil {
			return false
		}
		for _, x := range qs {
			if x.Name == rabbitQueue {
				q = x
				return cond(q)
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("timed out after 2m waiting for %s; list_queues said: %s", what, last)
	}
	return q
}
