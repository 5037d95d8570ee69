package mqtt

import (
	"fieldlink/uplink/site"
	"fmt"
	"slices"
	"testing"

	"fieldlink/uplink"
)

// siteErrs records a kind's reports as "field: message".
type siteErrs []string

func (e *siteErrs) Errorf(field, format string, args ...any) {
	*e = append(*e, field+": "+fmt.Sprintf(format, args...))
}
func (*siteErrs) Path(p string) string       { return p }
func (*siteErrs) Readable(path string) error { return nil }

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
		{"sparkplug_b without sparkplug", site.Upstream{URL: "mqtt://h", Known: true, Encoding: string(uplink.EncodingSparkplugB)}, true,
			[]string{"sparkplug: encoding sparkplug_b needs sparkplug: {group_id: …}"}, DefaultTopic},
		{"sparkplug elsewhere, ids checked", site.Upstream{URL: "http://h", Known: true, Sparkplug: &site.Sparkplug{GroupID: "a/b", EdgeNode: "n", PrimaryHost: "#"}}, false,
			[]string{"sparkplug: applies only to an mqtt:// or mqtts:// upstream with encoding: sparkplug_b",
				`sparkplug.group_id: must not be empty nor hold '/', '+' or '#', got "a/b"`,
				`sparkplug.primary_host: must not be empty nor hold '/', '+' or '#', got "#"`}, ""},
	} {
		var errs siteErrs
		u := tc.u
		Kind{}.CheckSite(&u, tc.mine, &errs)
		if !slices.Equal(errs, tc.want) || u.Topic != tc.topic {
			t.Errorf("%s: got %q, topic %q; want %q, topic %q", tc.name, errs, u.Topic, tc.want, tc.topic)
		}
	}
}
