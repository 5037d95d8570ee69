package mqtt

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/selector"
	"fieldlink/uplink"
	paho "github.com/eclipse/paho.mqtt.golang"
)

// newMQTTTestPool is a pool whose probes run every 50 ms, with the site's
// variables, probing MQTT upstreams on probeTopic.
func newMQTTTestPool(t *testing.T, probeTopic string) (*uplink.Pool, *selector.Table) {
	t.Helper()
	table := selector.NewTable(selector.Options{})
	log, _ := mqttLogger(t)
	p := uplink.NewPool(uplink.PoolConfig{
		Table: table, Delivery: uplink.NewDelivery(nil, table, mustStrategy(t, "least_conn"), uplink.DeliveryOptions{}),
		Window: 8, Batch: 10, ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 40 * time.Millisecond,
		Vars: map[string]string{"site": "s1", "gateway": "gw1"}, ProbeTopic: probeTopic, Logger: log,
	})
	t.Cleanup(p.Stop)
	return p, table
}

func mustStrategy(t *testing.T, name string) selector.Strategy {
	s, err := selector.New(name, selector.StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The pool probes an MQTT upstream with QoS 1 publishes on the probe topic
// (the broker's answer), not with TCP connects (the network's): an empty
// message, not retained, on the default topic of this gateway.
func TestPoolProbesMQTTWithAPublish(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	var got atomic.Pointer[paho.Message]
	var n atomic.Int64
	c := mqttClient(t, b.Addr(), "test-probe-sub")
	if tok := c.Subscribe("#", 1, func(_ paho.Client, m paho.Message) {
		if strings.HasPrefix(m.Topic(), "fieldlink-probe/") {
			got.Store(&m)
			n.Add(1)
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	p, _ := newMQTTTestPool(t, "")
	if _, err := p.Add(uplink.UpstreamConfig{URL: b.URL()}); err != nil {
		t.Fatal(err)
	}
	testtool.WaitFor(t, 10*time.Second, "two probes reach the subscriber", func() bool { return n.Load() >= 2 })
	m := *got.Load()
	if m.Topic() != "fieldlink-probe/s1/gw1" || len(m.Payload()) != 0 || m.Retained() || m.Qos() != 1 {
		t.Errorf("probe on %q, payload %q, retained %v, QoS %d; want fieldlink-probe/s1/gw1, empty, not retained, QoS 1",
			m.Topic(), m.Payload(), m.Retained(), m.Qos())
	}
}

// probe_topic off, a Sparkplug B upstream, and an upstream with a health
// target of its own are probed with TCP connects: nothing is published.
func TestPoolProbesWithTCPWhenTold(t *testing.T) {
	for _, tc := range []struct {
		name, topic string
		up          func(url string) uplink.UpstreamConfig
	}{
		{"probe_topic off", "off", func(url string) uplink.UpstreamConfig { return uplink.UpstreamConfig{URL: url} }},
		{"sparkplug", "", func(url string) uplink.UpstreamConfig {
			return uplink.UpstreamConfig{URL: url, Options: &SparkplugConfig{GroupID: "farm", EdgeNode: "gw1"}}
		}},
		{"health target", "", func(url string) uplink.UpstreamConfig {
			target, _ := uplink.ProbeTarget(url)
			return uplink.UpstreamConfig{URL: url, ProbeURL: target}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mqttStartBroker(t, mqttBrokerOpts{})
			sub := mqttSubscribe(t, b.Addr(), "fieldlink-probe/#")
			// The gateway's first publish after it connects: its status,
			// or a Sparkplug node's birth.
			any := mqttSubscribe(t, b.Addr(), "#")
			p, table := newMQTTTestPool(t, tc.topic)
			idx, err := p.Add(tc.up(b.URL()))
			if err != nil {
				t.Fatal(err)
			}
			// Wait for a probe that succeeded over the connection, then
			// for a probe it published to have had time to arrive: a
			// marker published after it on the same broker comes after.
			testtool.WaitFor(t, 10*time.Second, "a publish of the gateway's, once connected", func() bool { return any.count() > 0 })
			up := time.Now()
			testtool.WaitFor(t, 10*time.Second, "a probe while connected", func() bool {
				s := table.Snapshot()[idx]
				return s.ProbeRTT > 0 && s.ProbeAge < time.Since(up)
			})
			marker := mqttSubscribe(t, b.Addr(), "fieldlink-probe/marker")
			mc := mqttClient(t, b.Addr(), "test-marker")
			if tok := mc.Publish("fieldlink-probe/marker", 1, false, "m"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatal(tok.Error())
			}
			testtool.WaitFor(t, 10*time.Second, "the marker arrives", func() bool { return marker.count() == 1 })
			if n := sub.count(); n != 1 {
				t.Errorf("%d messages under fieldlink-probe/, want the marker alone", n)
			}
		})
	}
}
