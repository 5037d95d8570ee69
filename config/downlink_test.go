package config_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/profile"
)

func embedded(dir string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, dir) }

const downlinkSite = `site: {id: "001"}
gateway: {id: gw-01}
buses:
  - name: field
    url: tcp://127.0.0.1:1502
    devices:
      - name: valve-1
        profile: generic-irrigation-valve
        slave: 4
        writable:
          - {point: ValveOpen}
          - {point: Setpoint, min: 0, max: 100, step: 0.5, idempotent: true,
             interlock: [{device: th-1, point: Temperature, above: 0.2}]}
      - name: th-1
        profile: renke-rs-ws-n01
        slave: 5
        interval: 30s
      - name: ch4-1
        profile: generic-mine-methane-breaker
        slave: 6
uplink: {upstreams: [{url: 'mqtt://127.0.0.1:1883'}]}
downlink: {enabled: true, allow_unsigned: true}
`

// A site file that allows writes gets the defaults, and the interlock's
// max_age follows its device's interval.
func TestDownlinkDefaults(t *testing.T) {
	c, err := config.Parse("site.yaml", []byte(downlinkSite), embedded)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Downlink
	if !d.Enabled || d.Topic != config.DefaultCommandTopic || d.ResultTopic != config.DefaultResultTopic || d.MaxAge != config.DefaultMaxAge {
		t.Errorf("downlink %+v, want the defaults", d)
	}
	w := c.Buses[0].Devices[0].Writable
	if len(w) != 2 || !w[1].Idempotent || *w[1].Max != 100 || w[1].Step != 0.5 {
		t.Fatalf("writable %+v", w)
	}
	if got := w[1].Interlock[0].MaxAge; got != time.Minute {
		t.Errorf("interlock max_age %v, want 1m0s (twice th-1's 30s interval)", got)
	}
}

// gateway check refuses a writable point that does not exist, is
// read-only or is a safety register, with file, line and field.
func TestDownlinkErrors(t *testing.T) {
	for _, tc := range []struct{ old, new, field, pos, msg string }{
		{"{point: ValveOpen}", "{point: ValveShut}", "buses[0].devices[0].writable[0].point", "11:21", `profile generic-irrigation-valve has no point "ValveShut"`},
		{"{point: ValveOpen}", "{point: Flow}", "buses[0].devices[0].writable[0].point", "11:21", "Flow is read-only in profile generic-irrigation-valve"},
		{"slave: 6", "slave: 6\n        writable: [{point: CutOffRelay}]", "buses[0].devices[2].writable[0].point", "21:28", "CutOffRelay is a safety register of profile generic-mine-methane-breaker: the gateway never writes it"},
		{"min: 0, max: 100", "min: 100, max: 0", "buses[0].devices[0].writable[1].max", "12:46", "must be ≥ min (100), got 0"},
		{"device: th-1", "device: th-9", "buses[0].devices[0].writable[1].interlock[0].device", "13:35", `no device "th-9" in this site`},
		{"point: Temperature", "point: Level", "buses[0].devices[0].writable[1].interlock[0].point", "13:48", `device th-1 has no point "Level"`},
		{", above: 0.2}", "}", "buses[0].devices[0].writable[1].interlock[0]", "13:26", "give above, below or both"},
		{"{enabled: true,", "{enabled: true, max_age: 48h,", "downlink.max_age", "22:36", "must be between 1s and 12h0m0s"},
		{"{enabled: true,", "{enabled: true, keys: [nowhere.pub],", "downlink.keys[0]", "22:34", "gateway keygen"},
		{"{enabled: true,", "{enabled: true, result_topic: 'fieldlink/{site}/{gateway}/cmd',", "downlink.result_topic", "22:41", "must differ from downlink.topic"},
	} {
		src := strings.Replace(downlinkSite, tc.old, tc.new, 1)
		if src == downlinkSite {
			t.Fatalf("%s: the case does not change the file", tc.field)
		}
		file := filepath.Join(t.TempDir(), "site.yaml")
		_, err := config.Parse(file, []byte(src), embedded)
		es, ok := yamlconf.IsErrors(err)
		if !ok {
			t.Fatalf("%s: want positioned errors, got %v", tc.field, err)
		}
		found := false
		for _, e := range es {
			if e.Field == tc.field && strings.Contains(e.Msg, tc.msg) {
				found = true
				if got := e.Error(); !strings.HasPrefix(got, file+":"+tc.pos+":") {
					t.Errorf("%s: %q does not start with %s:%s", tc.field, got, file, tc.pos)
				}
			}
		}
		if !found {
			t.Errorf("no error at %s saying %q; got:\n%v", tc.field, tc.msg, err)
		}
	}
}

// A downlink without keys runs unsigned commands from anyone who can
// publish on the broker: gateway check refuses it, at downlink.enabled,
// unless the site file says downlink.allow_unsigned: true, and then warns.
func TestDownlinkUnsigned(t *testing.T) {
	file := filepath.Join(t.TempDir(), "site.yaml")
	src := strings.Replace(downlinkSite, "{enabled: true, allow_unsigned: true}", "{enabled: true}", 1)
	_, err := config.Parse(file, []byte(src), embedded)
	es, ok := yamlconf.IsErrors(err)
	if !ok || len(es) != 1 || es[0].Field != "downlink.enabled" || !strings.HasPrefix(es[0].Error(), file+":22:21:") ||
		!strings.Contains(es[0].Msg, "downlink.keys") || !strings.Contains(es[0].Msg, "downlink.allow_unsigned: true") {
		t.Fatalf("enabled without keys: want one error at %s:22:21 downlink.enabled naming downlink.keys and allow_unsigned, got %v", file, err)
	}

	c, err := config.Parse(file, []byte(downlinkSite), embedded)
	if err != nil {
		t.Fatalf("allow_unsigned: %v", err)
	}
	if !c.Downlink.AllowUnsigned || !strings.Contains(strings.Join(c.Warnings, "\n"), "unsigned") {
		t.Errorf("allow_unsigned: %+v, warnings %q; want a warning that commands run unsigned", c.Downlink, c.Warnings)
	}

	// Off, the downlink needs neither.
	off := strings.Replace(downlinkSite, "{enabled: true, allow_unsigned: true}", "{enabled: false}", 1)
	if c, err := config.Parse(file, []byte(off), embedded); err != nil || strings.Contains(strings.Join(c.Warnings, "\n"), "unsigned") {
		t.Errorf("downlink off: %v %q", err, c.Warnings)
	}
}
