// Package kinds registers every kind of upstream with the uplink's core:
// a program that connects upstreams, names them or explains their errors
// imports it (for its effect, or for [Table]). A new kind is its folder
// under uplink/ and one line of the table.
package kinds

import (
	"fieldlink/uplink"
	"fieldlink/uplink/http"
	"fieldlink/uplink/mqtt"
	"fieldlink/uplink/sparkplug"
)

// Table is each kind with the schemes and encodings it takes, in the order
// they are registered; the first kind of a scheme takes that scheme's
// other encodings too (MQTT before the kinds built on its connection).
var Table = []struct {
	Schemes   []string
	Encodings []uplink.Encoding
	Kind      uplink.Kind
}{
	{[]string{"mqtt", "mqtts"}, []uplink.Encoding{uplink.EncodingJSON, uplink.EncodingInfluxLine}, mqtt.Kind{}},
	{[]string{"mqtt", "mqtts"}, []uplink.Encoding{uplink.EncodingSparkplugB}, sparkplug.Kind{}},
	{[]string{"http", "https"}, []uplink.Encoding{uplink.EncodingJSON, uplink.EncodingInfluxLine}, http.Kind{}},
}

func init() {
	for _, k := range Table {
		uplink.Register(k.Schemes, k.Encodings, k.Kind)
	}
}
