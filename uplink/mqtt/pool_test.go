package mqtt

import (
	"fieldlink/uplink/mqtt/mqtttest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// The pool probes an MQTT upstream with QoS 1 publishes on the probe topic
// (the broker's answer), not with TCP connects (the network's): an empty
// message, not retained, on the default topic of this gateway.
func TestPoolProbesMQTTWithAPublish(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	var got atomic.Pointer[paho.Message]
	var n atomic.Int64
	c := mqtttest.Client(t, b.Addr(), "test-probe-sub")
	if tok := c.Subscribe("#", 1, func(_ paho.Client, m paho.Message) {
		if strings.HasPrefix(m.Topic(), "fieldlink-probe/") {
			got.Store(&m)
			n.Add(1)
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	p, _ := mqtttest.Pool(t, "")
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

// probe_topic off and an upstream with a probe URL of its own are
// probed with TCP connects: nothing is published (for a Sparkplug B
// upstream see fieldlink/uplink/sparkplug).
func TestPoolProbesWithTCPWhenTold(t *testing.T) {
	t.Run("probe_topic off", func(t *testing.T) {
		mqtttest.ProbesWithTCP(t, "off", func(url string) uplink.UpstreamConfig { return uplink.UpstreamConfig{URL: url} })
	})
	t.Run("probe URL", func(t *testing.T) {
		mqtttest.ProbesWithTCP(t, "", func(url string) uplink.UpstreamConfig {
			target, _ := uplink.ProbeTarget(url)
			return uplink.UpstreamConfig{URL: url, ProbeURL: target}
		})
	})
}
