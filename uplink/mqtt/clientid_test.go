package mqtt

import (
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// Two gateways installed from one image with the same gateway.id connect
// with the same client id: the broker drops each connection as the other
// connects, over and over. Each says so in words, in its log and in its
// last error, rather than "connection lost: EOF".
func TestMQTTClientIDInUseElsewhere(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	const id = "fieldlink-gw1-1"
	logA, bufA := mqtttest.Logger(t)
	logB, _ := mqtttest.Logger(t)
	a, _ := mqttRun(t, mqttConfig{URL: b.URL(), ClientID: id, Logger: logA})
	mqttRun(t, mqttConfig{URL: b.URL(), ClientID: id, Logger: logB})
	const words = "another client uses this gateway's MQTT client id"
	testtool.WaitFor(t, 30*time.Second, "the log to say another client uses the id", func() bool {
		return strings.Contains(bufA.String(), words)
	})
	if text, at := a.lastError(); !strings.HasPrefix(text, words) || !strings.Contains(text, id) || at.IsZero() {
		t.Errorf("last error %q at %v: want it to say %q and name the id", text, at, words)
	}

	// One client alone, its broker killed and started again: a lost
	// connection, not another client.
	b2 := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	c, _ := mqttRun(t, mqttConfig{URL: b2.URL(), ClientID: "fieldlink-gw2-1"})
	mqtttest.WaitConnected(t, c.Connected, true)
	b2.Kill()
	mqtttest.WaitConnected(t, c.Connected, false)
	b2.Start()
	mqtttest.WaitConnected(t, c.Connected, true)
	if text, _ := c.lastError(); text == "" || strings.Contains(text, words) {
		t.Errorf("a broker restarted: last error %q", text)
	}
}

// A cluster electing a stream leader cannot store publishes: a NATS node
// then closes the connection of each publisher whose publish waited too
// long (4 s), and does it again after each reconnect, each time just after
// it accepted the connection, as a takeover would. But a publish was
// waiting for its PUBACK all along, and a takeover waits for nothing: the
// gateway must not say that another client uses its id. The relay plays
// the stalled node, for the "online" publish of each connect and for the
// packets.
func TestMQTTStalledDropsAreNoTakeover(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  string
		packets bool
	}{
		{"status publish", "", false},
		{"packets", statusTopicOff, true},
		// Probes stop waiting for their PUBACK at their deadline, well
		// before the node gives up on the publish and closes.
		{"probes", statusTopicOff, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
			relay := mqttStartRelay(t, b.Addr())
			relay.stallFor.Store(int64(500 * time.Millisecond))
			log, buf := mqtttest.Logger(t)
			m, err := newMQTT(mqttConfig{URL: relay.url(), StatusTopic: tc.status, Logger: log,
				Vars: map[string]string{"site": "s1", "gateway": "gw1"}})
			if err != nil {
				t.Fatal(err)
			}
			// The longest backoff bounds what a takeover's drop lives: the
			// stalled connections live about 500 ms.
			m.backoffMin, m.backoffMax, m.stallAge = 20*time.Millisecond, 10*time.Second, 200*time.Millisecond
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { m.Run(ctx) })
			wg.Go(func() { // packets or probes, while connected
				for ctx.Err() == nil {
					var err error
					if tc.packets {
						err = m.publish(ctx, map[string]string{"data_type": "Gas"}, []byte("p"))
					} else {
						pctx, pcancel := context.WithTimeout(ctx, 20*time.Millisecond)
						err = m.PublishTo(pctx, "fl-probe/s1/gw1", nil, false)
						pcancel()
					}
					if err != nil {
						select {
						case <-ctx.Done():
						case <-time.After(10 * time.Millisecond):
						}
					}
				}
			})
			defer wg.Wait()
			defer cancel()
			const drops = mqttTakeoverDrops + 2
			testtool.WaitFor(t, 60*time.Second, "the stalled relay to close the connection several times", func() bool {
				return relay.stalls.Load() >= drops
			})
			if text := buf.String(); strings.Contains(text, "another client uses this gateway's MQTT client id") {
				t.Errorf("%d stalled drops taken for another client using the id", relay.stalls.Load())
			}
		})
	}
}

// A node that cannot reach its session store (a cluster electing the
// session stream's leader) closes each new connection before its CONNACK,
// over and over: no takeover either, since no connection was ever taken
// over.
func TestMQTTRefusedBeforeCONNACKIsNoTakeover(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr())
	relay.refuse.Store(true)
	log, buf := mqtttest.Logger(t)
	m, _ := mqttRun(t, mqttConfig{URL: relay.url(), Logger: log})
	testtool.WaitFor(t, 30*time.Second, "several connects refused", func() bool {
		return strings.Count(buf.String(), "mqtt upstream down") >= mqttTakeoverDrops+2
	})
	if strings.Contains(buf.String(), "another client uses this gateway's MQTT client id") {
		t.Error("connects refused before their CONNACK taken for another client using the id")
	}
	relay.refuse.Store(false)
	mqtttest.WaitConnected(t, m.Connected, true)
}
