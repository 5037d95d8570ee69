package sparkplug

import (
	"fieldlink/uplink/mqtt/mqtttest"
	"slices"
	"testing"

	"fieldlink/uplink"
	"fieldlink/uplink/site"
)

func TestCheckSite(t *testing.T) {
	sp := func(g, n, h string) *site.Sparkplug { return &site.Sparkplug{GroupID: g, EdgeNode: n, PrimaryHost: h} }
	node := string(uplink.EncodingSparkplugB)
	for _, tc := range []struct {
		name string
		u    site.Upstream
		mine bool
		want []string
	}{
		{"a node", site.Upstream{URL: "mqtt://h", Known: true, Encoding: node, Sparkplug: sp("g", "n", "")}, true, nil},
		{"sparkplug_b without sparkplug", site.Upstream{URL: "mqtt://h", Known: true, Encoding: node}, true,
			[]string{"sparkplug: encoding sparkplug_b needs sparkplug: {group_id: …}"}},
		{"sparkplug elsewhere, ids checked", site.Upstream{URL: "http://h", Known: true, Sparkplug: sp("a/b", "n", "#")}, false,
			[]string{"sparkplug: applies only to an mqtt:// or mqtts:// upstream with encoding: sparkplug_b",
				`sparkplug.group_id: must not be empty nor hold '/', '+' or '#', got "a/b"`,
				`sparkplug.primary_host: must not be empty nor hold '/', '+' or '#', got "#"`}},
		{"sparkplug on MQTT as JSON", site.Upstream{URL: "mqtts://h", Known: true, Sparkplug: sp("g", "n+", "")}, false,
			[]string{"sparkplug: applies only to an mqtt:// or mqtts:// upstream with encoding: sparkplug_b",
				`sparkplug.edge_node: must not be empty nor hold '/', '+' or '#', got "n+"`}},
		// The MQTT kind says the encoding is unknown, and that alone.
		{"sparkplug on MQTT of an unknown encoding", site.Upstream{URL: "mqtt://h", Known: true, Encoding: "csv", Sparkplug: sp("g", "n", "")}, false, nil},
		{"sparkplug on HTTP of an unknown encoding", site.Upstream{URL: "http://h", Known: true, Encoding: "csv", Sparkplug: sp("g", "n", "")}, false,
			[]string{"sparkplug: applies only to an mqtt:// or mqtts:// upstream with encoding: sparkplug_b"}},
	} {
		var errs mqtttest.SiteErrs
		u := tc.u
		Kind{}.CheckSite(&u, tc.mine, &errs)
		if !slices.Equal(errs, tc.want) {
			t.Errorf("%s: got %q; want %q", tc.name, errs, tc.want)
		}
	}
}
