package mqtt

import (
	"strings"

	"fieldlink/uplink"
	"fieldlink/uplink/site"
)

// CheckSite checks the site file's settings MQTT owns on the upstream u,
// mine when u is an MQTT upstream of no other kind: its topic (filling in
// [DefaultTopic]), its encoding and its load topic. An upstream of a kind
// built on the MQTT connection (mqtt:// or mqtts://, of that kind's
// encoding) takes the topic and the load topic too.
func (Kind) CheckSite(u *site.Upstream, mine bool, f site.File) {
	enc := uplink.Encoding(u.Encoding)
	scheme, _, _ := strings.Cut(u.URL, "://")
	onMQTT := mine || u.Known && (scheme == "mqtt" || scheme == "mqtts")
	if u.Topic != "" && !onMQTT && u.Known {
		f.Errorf("topic", "topic applies only to mqtt:// and mqtts:// upstreams")
	}
	if onMQTT && u.Topic == "" {
		u.Topic = DefaultTopic
	}
	if mine && enc == uplink.EncodingInfluxLine {
		f.Errorf("encoding", "influx_line applies only to http:// and https:// upstreams")
	}
	if mine && enc != "" && enc != uplink.EncodingJSON && enc != uplink.EncodingInfluxLine {
		f.Errorf("encoding", "unknown encoding %q for an MQTT upstream (valid: json, sparkplug_b)", enc)
	}
	if u.LoadTopic != "" && !onMQTT && u.Known {
		f.Errorf("load.topic", "a load topic needs an MQTT upstream")
	}
}
