package uplink

// Encoding is how an upstream receives packets: the zero value,
// [EncodingJSON], posts them as they are; [EncodingInfluxLine] writes them
// as InfluxDB line protocol; [EncodingSparkplugB] makes an MQTT upstream
// a Sparkplug B edge node.
type Encoding string

// The encodings, as the site file spells them: an HTTP upstream's, and an
// MQTT upstream's that is a Sparkplug B edge node (fieldlink/uplink/sparkplug).
const (
	EncodingJSON       Encoding = "json"
	EncodingInfluxLine Encoding = "influx_line"
	EncodingSparkplugB Encoding = "sparkplug_b"
)

// Encodings are the valid values of an HTTP upstream's encoding ("" is json).
var Encodings = []Encoding{EncodingJSON, EncodingInfluxLine}
