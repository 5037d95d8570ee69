package mqtt

import (
	"fieldlink/sparkplug"
	"fieldlink/uplink"
	"fieldlink/uplink/site"
)

// CheckSite checks the site file's settings MQTT owns on the upstream u,
// mine when u is an MQTT upstream: its topic (filling in [DefaultTopic]),
// its encoding, its load topic and its sparkplug settings, which only an
// MQTT upstream with encoding sparkplug_b takes.
func (Kind) CheckSite(u *site.Upstream, mine bool, f site.File) {
	enc := uplink.Encoding(u.Encoding)
	if u.Topic != "" && !mine && u.Known {
		f.Errorf("topic", "topic applies only to mqtt:// and mqtts:// upstreams")
	}
	if mine && u.Topic == "" {
		u.Topic = DefaultTopic
	}
	if mine && enc == uplink.EncodingInfluxLine {
		f.Errorf("encoding", "influx_line applies only to http:// and https:// upstreams")
	}
	sp := u.Sparkplug
	isSp := enc == uplink.EncodingSparkplugB
	switch {
	case mine && !isSp && enc != "" && enc != uplink.EncodingJSON && enc != uplink.EncodingInfluxLine:
		f.Errorf("encoding", "unknown encoding %q for an MQTT upstream (valid: json, sparkplug_b)", enc)
	case mine && isSp && sp == nil:
		f.Errorf("sparkplug", "encoding sparkplug_b needs sparkplug: {group_id: …}")
	case sp != nil && !(mine && isSp):
		f.Errorf("sparkplug", "applies only to an mqtt:// or mqtts:// upstream with encoding: sparkplug_b")
	}
	if sp != nil {
		for _, id := range []struct{ field, v string }{{"group_id", sp.GroupID}, {"edge_node", sp.EdgeNode}, {"primary_host", sp.PrimaryHost}} {
			if id.v == "" && id.field == "primary_host" {
				continue
			}
			if err := sparkplug.CheckID(id.v); err != nil {
				f.Errorf("sparkplug."+id.field, "must not be empty nor hold '/', '+' or '#', got %q", id.v)
			}
		}
	}
	if u.LoadTopic != "" && !mine && u.Known {
		f.Errorf("load.topic", "a load topic needs an MQTT upstream")
	}
}
