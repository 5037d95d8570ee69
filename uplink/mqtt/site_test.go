package mqtt

import (
	"fieldlink/uplink/mqtt/mqtttest"
	"fieldlink/uplink/site"
	"slices"
	"testing"

	"fieldlink/uplink"
)

func TestCheckSite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		u     site.Upstream
		mine  bool
		want  []string
		topic string
	}{
		{"defaults", site.Upstream{URL: "mqtt://h", Known: true}, true, nil, DefaultTopic},
		{"own topic kept", site.Upstream{URL: "mqtt://h", Known: true, Topic: "t"}, true, nil, "t"},
		{"topic on another kind", site.Upstream{URL: "http://h", Known: true, Topic: "t", LoadTopic: "l"}, false,
			[]string{"topic: topic applies only to mqtt:// and mqtts:// upstreams", "load.topic: a load topic needs an MQTT upstream"}, "t"},
		{"a refused URL's topic", site.Upstream{URL: "ftp://h", Topic: "t", LoadTopic: "l"}, false, nil, "t"},
		{"influx_line", site.Upstream{URL: "mqtt://h", Known: true, Encoding: string(uplink.EncodingInfluxLine)}, true,
			[]string{"encoding: influx_line applies only to http:// and https:// upstreams"}, DefaultTopic},
		{"unknown encoding", site.Upstream{URL: "mqtt://h", Known: true, Encoding: "csv", Sparkplug: &site.Sparkplug{GroupID: "g", EdgeNode: "n"}}, true,
			[]string{`encoding: unknown encoding "csv" for an MQTT upstream (valid: json, sparkplug_b)`}, DefaultTopic},
		// An upstream of a kind on the MQTT connection takes its topic
		// and load topic; its encoding is that kind's.
		{"a kind on the connection", site.Upstream{URL: "mqtts://h", Known: true, Encoding: string(uplink.EncodingSparkplugB), LoadTopic: "l"}, false,
			nil, DefaultTopic},
		{"sparkplug elsewhere", site.Upstream{URL: "http://h", Known: true, Sparkplug: &site.Sparkplug{GroupID: "a/b", EdgeNode: "n", PrimaryHost: "#"}}, false,
			nil, ""},
	} {
		var errs mqtttest.SiteErrs
		u := tc.u
		Kind{}.CheckSite(&u, tc.mine, &errs)
		if !slices.Equal(errs, tc.want) || u.Topic != tc.topic {
			t.Errorf("%s: got %q, topic %q; want %q, topic %q", tc.name, errs, u.Topic, tc.want, tc.topic)
		}
	}
}
