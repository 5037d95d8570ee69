package sparkplug

import (
	"slices"
	"strings"

	spb "fieldlink/sparkplug"
	"fieldlink/uplink"
	"fieldlink/uplink/site"
)

// CheckSite checks the site file's sparkplug settings on the upstream u,
// mine when u is a node (an MQTT upstream with encoding sparkplug_b): a
// node needs them, no other upstream takes them, and their ids must be
// valid in a topic. An MQTT upstream of an encoding no kind takes has the
// MQTT kind's one error, which names sparkplug_b among the valid ones.
func (Kind) CheckSite(u *site.Upstream, mine bool, f site.File) {
	sp := u.Sparkplug
	switch {
	case mine && sp == nil:
		f.Errorf("sparkplug", "encoding sparkplug_b needs sparkplug: {group_id: …}")
	case sp != nil && !mine && !unknownMQTTEncoding(u):
		f.Errorf("sparkplug", "applies only to an mqtt:// or mqtts:// upstream with encoding: sparkplug_b")
	}
	if sp == nil {
		return
	}
	for _, id := range []struct{ field, v string }{{"group_id", sp.GroupID}, {"edge_node", sp.EdgeNode}, {"primary_host", sp.PrimaryHost}} {
		if id.v == "" && id.field == "primary_host" {
			continue
		}
		if err := spb.CheckID(id.v); err != nil {
			f.Errorf("sparkplug."+id.field, "must not be empty nor hold '/', '+' or '#', got %q", id.v)
		}
	}
}

// unknownMQTTEncoding reports whether u is an MQTT upstream of an encoding
// that no kind takes.
func unknownMQTTEncoding(u *site.Upstream) bool {
	scheme, _, _ := strings.Cut(u.URL, "://")
	enc := uplink.Encoding(u.Encoding)
	return u.Known && (scheme == "mqtt" || scheme == "mqtts") &&
		enc != "" && enc != uplink.EncodingSparkplugB && !slices.Contains(uplink.Encodings, enc)
}
