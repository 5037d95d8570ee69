//go:build cluster

package cluster

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/internal/testtool"
)

// pubackRates are the offered rates, publishes a second on one node, at
// which TestPuback times PUBACKs: from the fleet's 350 to past what one
// node of the test's cluster serves on 2 cores.
var pubackRates = []int{100, 350, 700, 1400, 2800}

// pubackConns publishers share a node's offered rate, as a fleet's
// gateways do.
const pubackConns = 10

// TestPuback measures what the lab's NATS model rests on: each node's QoS 1
// PUBACK latency against the rate offered to it alone, the node that leads
// $MQTT_msgs apart from its followers (a follower forwards every publish to
// the leader and waits for its answer). A persistent QoS 1 subscriber on
// another node keeps the messages of interest, as the platform does. It
// prints one line per node and rate (p50, p90, p99, the rate acknowledged,
// publishes unanswered within 5 s) and fails only when a node does not
// answer at the lowest rate. Run with CLUSTER_PUBACK=1 (make
// cluster-check-puback, about a minute).
func TestPuback(t *testing.T) {
	if os.Getenv("CLUSTER_PUBACK") == "" {
		t.Skip("a measurement: CLUSTER_PUBACK=1 (make cluster-check-puback)")
	}
	bin := testtool.RequireSbin(t, "nats-server", "nats-server")
	nodes := newCluster(t, bin)
	sub, err := mqttClient(t, nodes[2].mqttAddr(), "puback-platform", false, nil)
	if err != nil {
		t.Fatalf("subscriber: %v", err)
	}
	var received atomic.Int64
	if tok := sub.Subscribe("puback/#", 1, func(paho.Client, paho.Message) { received.Add(1) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	checkStreams(t, nodes[0])
	leader := msgsLeader(t, nodes)
	var lines []string
	for i, n := range nodes {
		role := "follower"
		if i == leader {
			role = "leader"
		}
		var pubs []paho.Client
		for k := range pubackConns {
			c, err := mqttClient(t, n.mqttAddr(), fmt.Sprintf("puback-%s-%d", n.name, k), true, nil)
			if err != nil {
				t.Fatalf("publisher on %s: %v", n.name, err)
			}
			pubs = append(pubs, c)
		}
		for _, rate := range pubackRates {
			r := pubackRun(pubs, n.name, rate, 3*time.Second)
			l := fmt.Sprintf("cluster puback %s (%s): offered_per_s=%d acked_per_s=%.0f p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f unanswered=%d",
				n.name, role, rate, r.acked, ms(r.p50), ms(r.p90), ms(r.p99), r.unanswered)
			t.Log(l)
			lines = append(lines, l)
			if rate == pubackRates[0] && r.unanswered > 0 {
				t.Errorf("%s left %d publishes unanswered at %d a second", n.name, r.unanswered, rate)
			}
			time.Sleep(time.Second) // let a saturated node drain before the next rate
		}
		for _, c := range pubs {
			c.Disconnect(50)
		}
	}
	for _, l := range lines {
		fmt.Println(l) // the figures, for make's grep
	}
}

// pubackResult is one rate's figures.
type pubackResult struct {
	acked         float64 // PUBACKs a second
	p50, p90, p99 time.Duration
	unanswered    int
}

// pubackRun offers rate publishes a second to pubs, round robin, open loop
// (a publish does not wait for the previous one's PUBACK), for d, and
// times each to its PUBACK; a publish unanswered 5 s after the run counts
// as unanswered.
func pubackRun(pubs []paho.Client, node string, rate int, d time.Duration) pubackResult {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		wg   sync.WaitGroup
		miss atomic.Int64
	)
	gap := time.Second / time.Duration(rate)
	start := time.Now()
	n := int(d / gap)
	for k := range n {
		if w := time.Until(start.Add(time.Duration(k) * gap)); w > 0 {
			time.Sleep(w)
		}
		sent := time.Now()
		tok := pubs[k%len(pubs)].Publish(fmt.Sprintf("puback/%s/%d", node, k%len(pubs)), 1, false, []byte("x"))
		wg.Go(func() {
			if !tok.WaitTimeout(time.Until(start.Add(d+5*time.Second))) || tok.Error() != nil {
				miss.Add(1)
				return
			}
			l := time.Since(sent)
			mu.Lock()
			lat = append(lat, l)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return -1
		}
		return lat[min(int(p*float64(len(lat))), len(lat)-1)]
	}
	return pubackResult{
		acked: float64(len(lat)) / time.Since(start).Seconds(),
		p50:   q(0.5), p90: q(0.9), p99: q(0.99), unanswered: int(miss.Load()),
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
