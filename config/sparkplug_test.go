package config

import (
	"strings"
	"testing"
)

func TestSparkplugConfig(t *testing.T) {
	c, err := Parse("site.yaml", []byte(good+`uplink:
  upstreams:
    - {url: 'mqtt://h', encoding: sparkplug_b, sparkplug: {group_id: farm, primary_host: scada}}
    - {url: 'mqtt://h2', encoding: sparkplug_b, sparkplug: {group_id: farm, edge_node: node-7}}
`), testProfiles)
	if err != nil {
		t.Fatal(err)
	}
	sp := c.Uplink.Upstreams[0].Sparkplug
	if sp.GroupID != "farm" || sp.EdgeNode != c.Gateway.ID || sp.PrimaryHost != "scada" {
		t.Errorf("sparkplug %+v: edge_node should default to gateway.id %q", sp, c.Gateway.ID)
	}
	if n := c.Uplink.Upstreams[1].Sparkplug.EdgeNode; n != "node-7" {
		t.Errorf("edge_node %q", n)
	}
	for _, tc := range []struct{ add, want string }{
		{"{url: 'mqtt://h', encoding: sparkplug_b}", "uplink.upstreams[0].sparkplug: encoding sparkplug_b needs sparkplug"},
		{"{url: 'mqtt://h', sparkplug: {group_id: g}}", "uplink.upstreams[0].sparkplug: applies only to an mqtt:// or mqtts:// upstream with encoding: sparkplug_b"},
		{"{url: 'https://h', encoding: sparkplug_b, sparkplug: {group_id: g}}", "uplink.upstreams[0].sparkplug: applies only"},
		{"{url: 'mqtt://h', encoding: protobuf}", `uplink.upstreams[0].encoding: unknown encoding "protobuf" for an MQTT upstream (valid: json, sparkplug_b)`},
		{"{url: 'mqtt://h', encoding: sparkplug_b, sparkplug: {group_id: 'a/b'}}", `uplink.upstreams[0].sparkplug.group_id: must not be empty nor hold '/', '+' or '#', got "a/b"`},
		{"{url: 'mqtt://h', encoding: sparkplug_b, sparkplug: {group_id: g, edge_node: 'n+'}}", `sparkplug.edge_node: must not be empty`},
		{"{url: 'mqtt://h', encoding: sparkplug_b, sparkplug: {group_id: g, primary_host: '#'}}", `sparkplug.primary_host: must not be empty`},
		{"{url: 'mqtt://h', encoding: sparkplug_b, sparkplug: {}}", `group_id`},
		// Two servers of one node (same group_id and edge_node) name one
		// primary host.
		{"{url: 'mqtt://h', encoding: sparkplug_b, sparkplug: {group_id: g, primary_host: a}}, {url: 'mqtt://h2', encoding: sparkplug_b, sparkplug: {group_id: g, primary_host: b}}",
			`uplink.upstreams[1].sparkplug.primary_host: "b", but upstreams[0] is a server of the same node (group_id "g", edge_node "gw-01") with primary_host "a"`},
	} {
		_, err := Parse("site.yaml", []byte(good+"uplink: {upstreams: ["+tc.add+"]}\n"), testProfiles)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got  %v\n want …%s", tc.add, err, tc.want)
		}
	}
}

// A reload that changes the devices restarts a Sparkplug node's uplink:
// its births list them.
func TestSparkplugDiff(t *testing.T) {
	load := func(interval, enc string) *Config {
		t.Helper()
		src := strings.Replace(good, "interval: 5s", "interval: "+interval, 1) + "uplink: {upstreams: [{url: 'mqtt://h'" + enc + "}]}\n"
		c, err := Parse("site.yaml", []byte(src), testProfiles)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sp := ", encoding: sparkplug_b, sparkplug: {group_id: g}"
	if d := Diff(load("5s", sp), load("7s", sp)); !d.Sensors || !d.Uplink {
		t.Errorf("sparkplug, a device changed: %+v, want sensors and uplink", d)
	}
	if d := Diff(load("5s", ""), load("7s", "")); !d.Sensors || d.Uplink {
		t.Errorf("json, a device changed: %+v, want sensors only", d)
	}
}
