package mqtt

import (
	"fieldlink/uplink"
)

// The kind is registered for its tests as kinds registers it.
func init() {
	uplink.Register([]string{"mqtt", "mqtts"}, []uplink.Encoding{uplink.EncodingJSON, uplink.EncodingInfluxLine}, Kind{})
}

var mqttVars = map[string]string{"site": "s1", "gateway": "gw1"}
