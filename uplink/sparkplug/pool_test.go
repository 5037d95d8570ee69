package sparkplug

import (
	"testing"

	"fieldlink/uplink"
	"fieldlink/uplink/mqtt/mqtttest"
)

// A Sparkplug B upstream is probed with TCP connects, whatever the probe
// topic: nothing is published outside its namespace.
func TestPoolProbesNodeWithTCP(t *testing.T) {
	mqtttest.ProbesWithTCP(t, "", func(url string) uplink.UpstreamConfig {
		return uplink.UpstreamConfig{URL: url, Encoding: uplink.EncodingSparkplugB, Options: &Config{GroupID: "farm", EdgeNode: "gw1"}}
	})
}
