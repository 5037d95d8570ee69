package config

import (
	"fieldlink/internal/yamlconf"
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

// validateSparkplug checks what no kind of upstream can: that the
// upstreams of one Sparkplug B node name one primary host. (The settings
// themselves are the Sparkplug B kind's to check, fieldlink/uplink/sparkplug's,
// and edge_node's default is filled in with the others.)
func (c *Config) validateSparkplug(doc *yamlconf.Doc, f string, up *Upstream) {
	sp := up.Sparkplug
	if sp == nil {
		return
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
