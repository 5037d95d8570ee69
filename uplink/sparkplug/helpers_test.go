package sparkplug

import (
	"fieldlink/uplink"
	"fieldlink/uplink/mqtt"
)

// The kinds are registered for the tests as kinds registers them: MQTT
// first, then the node for sparkplug_b.
func init() {
	uplink.Register([]string{"mqtt", "mqtts"}, []uplink.Encoding{uplink.EncodingJSON, uplink.EncodingInfluxLine}, mqtt.Kind{})
	uplink.Register([]string{"mqtt", "mqtts"}, []uplink.Encoding{uplink.EncodingSparkplugB}, Kind{})
}
