package uplink

// Encoding is how an HTTP upstream receives packets: the zero value,
// [EncodingJSON], posts them as they are; [EncodingInfluxLine] writes them
// as InfluxDB line protocol.
type Encoding string

// The encodings of an HTTP upstream, as the site file spells them.
const (
	EncodingJSON       Encoding = "json"
	EncodingInfluxLine Encoding = "influx_line"
)

// Encodings are the valid values of an HTTP upstream's encoding ("" is json).
var Encodings = []Encoding{EncodingJSON, EncodingInfluxLine}
