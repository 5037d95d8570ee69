package config

import (
	"fieldlink/internal/yamlconf"
	"fieldlink/sparkplug"
	"fieldlink/uplink"
)

// Sparkplug names the Sparkplug B edge node of an MQTT upstream whose
// encoding is sparkplug_b (docs/sparkplug.md).
type Sparkplug struct {
	// GroupID is the Sparkplug group of the node's topics.
	GroupID string `yaml:"group_id,required"`
	// EdgeNode is the node's id; default gateway.id.
	EdgeNode string `yaml:"edge_node"`
	// PrimaryHost is the primary host application's id; empty: none.
	PrimaryHost string `yaml:"primary_host"`
}

// validateSparkplug checks the encoding of an MQTT upstream and its
// sparkplug settings, and fills in edge_node. (An HTTP upstream's encoding
// is validateHTTPAuth's.)
func (c *Config) validateSparkplug(doc *yamlconf.Doc, f string, up *Upstream, mqtt bool) {
	sp := up.Sparkplug
	isSp := up.Encoding == uplink.EncodingSparkplugB
	switch {
	case mqtt && !isSp && up.Encoding != "" && up.Encoding != uplink.EncodingJSON && up.Encoding != uplink.EncodingInfluxLine:
		// influx_line on MQTT is validateHTTPAuth's to report.
		doc.Errorf(f+".encoding", "unknown encoding %q for an MQTT upstream (valid: json, sparkplug_b)", up.Encoding)
	case mqtt && isSp && sp == nil:
		doc.Errorf(f+".sparkplug", "encoding sparkplug_b needs sparkplug: {group_id: …}")
	case sp != nil && !(mqtt && isSp):
		doc.Errorf(f+".sparkplug", "applies only to an mqtt:// or mqtts:// upstream with encoding: sparkplug_b")
	}
	if sp == nil {
		return
	}
	if sp.EdgeNode == "" {
		sp.EdgeNode = c.Gateway.ID
	}
	for _, id := range []struct{ field, v string }{{"group_id", sp.GroupID}, {"edge_node", sp.EdgeNode}, {"primary_host", sp.PrimaryHost}} {
		if id.v == "" && id.field == "primary_host" {
			continue
		}
		if err := sparkplug.CheckID(id.v); err != nil {
			doc.Errorf(f+".sparkplug."+id.field, "must not be empty nor hold '/', '+' or '#', got %q", id.v)
		}
	}
	// Upstreams with one group_id and edge_node are one node's servers
	// (docs/sparkplug.md), which has one primary host.
	for i := range c.Uplink.Upstreams {
		o := &c.Uplink.Upstreams[i]
		if o == up {
			break
		}
		if p := o.Sparkplug; p != nil && p.GroupID == sp.GroupID && p.EdgeNode == sp.EdgeNode && p.PrimaryHost != sp.PrimaryHost {
			doc.Errorf(f+".sparkplug.primary_host", "%q, but upstreams[%d] is a server of the same node (group_id %q, edge_node %q) with primary_host %q: a node has one primary host",
				sp.PrimaryHost, i, sp.GroupID, sp.EdgeNode, p.PrimaryHost)
			break
		}
	}
}

// sparkplugNode reports whether an upstream is a Sparkplug B node.
func (c *Config) sparkplugNode() bool {
	if c.Uplink == nil {
		return false
	}
	for _, u := range c.Uplink.Upstreams {
		if u.Sparkplug != nil {
			return true
		}
	}
	return false
}
