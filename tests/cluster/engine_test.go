//go:build cluster

package cluster

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
)

// mqttClient connects a paho client with id to addr (no automatic
// reconnect); lost, when not nil, is closed when the connection is lost.
func mqttClient(t *testing.T, addr, id string, clean bool, lost chan struct{}) (paho.Client, error) {
	t.Helper()
	var once sync.Once
	c, err := brokertest.Dial(brokertest.Options{
		ID: id, Brokers: []string{addr}, Persistent: !clean,
		ConnectTimeout: 5 * time.Second, KeepAlive: 5 * time.Second, Wait: 10 * time.Second, Quiesce: 50,
		Lost: func(error) {
			if lost != nil {
				once.Do(func() { close(lost) })
			}
		},
	})
	if err != nil {
		return nil, err // "no answer within 10s" when the node did not answer
	}
	t.Cleanup(c.Close)
	return c.Paho(), nil
}

// TestEngine checks, on Debian's nats-server, the facts docs/cluster.md
// states about its MQTT: what a PUBACK means, and what a lost majority and
// a client id used on two nodes do.
func TestEngine(t *testing.T) {
	bin := testtool.RequireSbin(t, "nats-server", "nats-server")
	nodes := newCluster(t, bin)
	a, b, c := nodes[0].mqttAddr(), nodes[1].mqttAddr(), nodes[2].mqttAddr()

	t.Run("PUBACK without a subscriber keeps nothing", func(t *testing.T) {
		pub, err := mqttClient(t, a, "facts-publisher", true, nil)
		if err != nil {
			t.Fatalf("publisher: %v", err)
		}
		tok := pub.Publish("facts/interest", 1, false, "before")
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("QoS 1 publish with no subscriber: no PUBACK: %v", tok.Error())
		}
		sub, err := mqttClient(t, b, "facts-subscriber", false, nil)
		if err != nil {
			t.Fatalf("subscriber: %v", err)
		}
		got := make(chan string, 10)
		st := sub.Subscribe("facts/#", 1, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
		if !st.WaitTimeout(10*time.Second) || st.Error() != nil {
			t.Fatalf("subscribe: %v", st.Error())
		}
		tok = pub.Publish("facts/interest", 1, false, "after")
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("QoS 1 publish with a subscriber: %v", tok.Error())
		}
		select {
		case m := <-got:
			if m != "after" {
				t.Fatalf("the subscriber got %q first: the message acknowledged before it subscribed was kept", m)
			}
			t.Logf("acknowledged with no subscriber, then never delivered: interest retention")
		case <-time.After(10 * time.Second):
			t.Fatal("the subscriber got nothing within 10s")
		}
	})

	t.Run("one client id on two nodes", func(t *testing.T) {
		lostA, lostB := make(chan struct{}), make(chan struct{})
		if _, err := mqttClient(t, a, "facts-twice", true, lostA); err != nil {
			t.Fatalf("first connection: %v", err)
		}
		_, errB := mqttClient(t, c, "facts-twice", true, lostB)
		select {
		case <-lostA:
		case <-time.After(10 * time.Second):
			t.Fatal("the first connection is still up 10s after the same client id connected to another node")
		}
		var bUp atomic.Bool
		if errB == nil {
			select {
			case <-lostB:
			case <-time.After(3 * time.Second): // a bound for the log line only
				bUp.Store(true)
			}
		}
		t.Logf("same client id on n1 then n3: the first connection was dropped; the second: connect error %v, still up 3s later %v", errB, bUp.Load())
	})

	t.Run("two of three nodes down", func(t *testing.T) {
		waitSettled(t, nodes[:])
		lost := make(chan struct{})
		pub, err := mqttClient(t, a, "facts-minority", true, lost)
		if err != nil {
			t.Fatalf("connect with the cluster whole: %v", err)
		}
		nodes[1].kill()
		nodes[2].kill()
		tok := pub.Publish("facts/minority", 1, false, "x")
		done := tok.WaitTimeout(15 * time.Second)
		if done && tok.Error() == nil {
			t.Fatal("a PUBACK from a node without a majority")
		}
		t.Logf("publish on the last node: answered %v, error %v", done, tok.Error())
		_, err = mqttClient(t, a, "facts-late", true, nil)
		if err == nil {
			t.Fatal("a CONNECT accepted by a node without a majority")
		}
		t.Logf("CONNECT to the last node: %v", err)
	})
}
