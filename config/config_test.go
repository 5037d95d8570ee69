package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/profile"
)

const windProfile = `
model: WS-1
data_type: Wind
serial: {baud: 4800, parity: N, data_bits: 8, stop_bits: 1}
interval: 5s
registers:
  - {name: WindSpeed, area: holding, address: 0, scale: 0.1, unit: m/s}
`

const lineProfile = `
model: NMEA wind
data_type: Wind
line:
  regex: '^\$WIMWV,(?P<dir>[0-9.]+),R,(?P<speed>[0-9.]+)'
  fields:
    - {name: WindDirection, group: dir}
    - {name: WindSpeed, group: speed}
`

func testProfiles(string) (profile.Set, error) {
	w, err := profile.Parse("wind", "wind.yaml", []byte(windProfile))
	if err != nil {
		return nil, err
	}
	l, err := profile.Parse("nmea-wind", "nmea-wind.yaml", []byte(lineProfile))
	if err != nil {
		return nil, err
	}
	return profile.Set{"wind": w, "nmea-wind": l}, nil
}

const good = `site: {id: "001", id_field: MineId, timezone: Asia/Shanghai}
gateway: {id: gw-01}
buses:
  - name: field-a
    url: rtu:///dev/ttyUSB0?baud=9600&parity=N&data_bits=8&stop_bits=1
    timeout: 300ms
    devices:
      - {name: anemometer-1, profile: wind, slave: 1, interval: 5s, data_type: Wind}
      - {name: anemometer-2, profile: wind, slave: 2}
  - name: plc
    url: tcp://127.0.0.1:1502
    devices:
      - {name: wind-tcp, profile: wind, slave: 1}
serial_sensors:
  - {name: ws-1, url: "serial:///dev/ttyS1?baud=4800", profile: nmea-wind}
`

func TestLoadGoodFillsDefaults(t *testing.T) {
	c, err := Parse("site.yaml", []byte(good), testProfiles)
	if err != nil {
		t.Fatal(err)
	}
	if c.Site.IDField != "MineId" || c.Location.String() != "Asia/Shanghai" || c.Packet.Values.String() != "strings" {
		t.Fatalf("site: %+v values %q", c.Site, c.Packet.Values)
	}
	d := c.Buses[0].Devices[1]
	if d.Interval != 5*time.Second || d.DataType != "Wind" {
		t.Fatalf("device defaults from profile: interval %v data_type %q", d.Interval, d.DataType)
	}
	if c.Buses[0].Timeout != 300*time.Millisecond || c.Buses[1].Timeout != time.Second {
		t.Fatalf("timeouts: %v, %v", c.Buses[0].Timeout, c.Buses[1].Timeout)
	}
	if len(c.Warnings) != 2 || !strings.Contains(c.Warnings[0], "baud 4800") || !strings.HasPrefix(c.Warnings[0], "site.yaml:8:") {
		t.Fatalf("want a warning about the profile's 4800 baud for each serial device, from line 8, got %q", c.Warnings)
	}
	if c.DeviceCount() != 4 {
		t.Fatalf("DeviceCount = %d", c.DeviceCount())
	}
}

// Every class of error names the file, the line and the field.
func TestErrorsNameFileLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"unknown key", "slave: 2}", "slave: 2, intervall: 5s}", "site.yaml:9:55: buses[0].devices[1].intervall: unknown field \"intervall\" (did you mean \"interval\"?)"},
		{"wrong type", "slave: 2}", "slave: two}", "site.yaml:9:52: buses[0].devices[1].slave: expected a whole number, got \"two\""},
		{"bad duration", "timeout: 300ms", "timeout: 300", "site.yaml:6:14: buses[0].timeout: expected a duration such as 500ms or 5s, got \"300\""},
		{"missing required", "{name: anemometer-2, profile: wind, slave: 2}", "{name: anemometer-2, slave: 2}", "site.yaml:9:9: buses[0].devices[1].profile: missing required field \"profile\""},
		{"impossible value", "slave: 2}", "slave: 300}", "site.yaml:9:52: buses[0].devices[1].slave: must be 1..247"},
		{"duplicate slave", "slave: 2}", "slave: 1}", "buses[0].devices[1].slave: slave 1 is already used on this bus by devices[0]"},
		{"duplicate device name", "name: wind-tcp", "name: anemometer-1", "site.yaml:13:16: buses[1].devices[0].name: name \"anemometer-1\" is already used by buses[0].devices[0].name"},
		{"unknown profile", "profile: wind, slave: 2", "profile: wnd, slave: 2", "site.yaml:9:39: buses[0].devices[1].profile: unknown profile \"wnd\" (did you mean \"wind\"?) (nearest: wind, nmea-wind; gateway profiles lists them all)"},
		{"line profile on a bus", "profile: wind, slave: 2", "profile: nmea-wind, slave: 2", "buses[0].devices[1].profile: profile \"nmea-wind\" is a line (serial text) profile"},
		{"bad url scheme", "tcp://127.0.0.1:1502", "udp://127.0.0.1:1502", "site.yaml:11:10: buses[1].url: "},
		{"bad url key", "stop_bits=1", "stopbits=1", "buses[0].url: "},
		{"id field", "id_field: MineId", "id_field: PlantId", "site.yaml:1:29: site.id_field: must be FarmId or MineId, got \"PlantId\""},
		{"time zone", "Asia/Shanghai", "Asia/Shanghia", "site.yaml:1:47: site.timezone: unknown time zone \"Asia/Shanghia\""},
		{"serial url", "serial:///dev/ttyS1?baud=4800", "serial:///dev/ttyS1?baud=fast", "serial_sensors[0].url: serial URL"},
		{"interval too short", "interval: 5s, data_type", "interval: 1ms, data_type", "buses[0].devices[0].interval: must be at least 100ms"},
		{"list expected", "devices:\n      - {name: wind-tcp", "devices: wind-tcp\n      - {name: wind-tcp", "site.yaml:13:1: invalid YAML: mapping values are not allowed"},
		{"yaml syntax", "gateway: {id: gw-01}", "gateway: {id: gw-01", "site.yaml:1:1: invalid YAML: did not find expected ',' or '}'"},
		{"values", "gateway: {id: gw-01}", "gateway: {id: gw-01}\npacket: {values: numbers}", "packet.values: must be strings or number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(good, tc.old, tc.new, 1)
			if src == good {
				t.Fatalf("test case does not change the file")
			}
			_, err := Parse("site.yaml", []byte(src), testProfiles)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, tc.want)
			}
			var e *yamlconf.Error
			if !errors.As(err, &e) || e.File != "site.yaml" || e.Line == 0 {
				t.Fatalf("error is not positioned: %#v", err)
			}
		})
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	src := strings.NewReplacer("slave: 2}", "slave: 0}", "id_field: MineId", "id_field: X", "timeout: 300ms", "timeout: soon").Replace(good)
	_, err := Parse("site.yaml", []byte(src), testProfiles)
	es, ok := yamlconf.IsErrors(err)
	if !ok || len(es) != 3 {
		t.Fatalf("want 3 errors, got %v", err)
	}
	for i := 1; i < len(es); i++ {
		if es[i].Line < es[i-1].Line {
			t.Fatalf("errors not in file order: %v", err)
		}
	}
}

func TestNothingToPoll(t *testing.T) {
	_, err := Parse("s.yaml", []byte("site: {id: x}\ngateway: {id: g}\n"), testProfiles)
	if err == nil || !strings.Contains(err.Error(), "nothing to poll") {
		t.Fatalf("got %v", err)
	}
	_, err = Parse("s.yaml", []byte("gateway: {id: g}\nbuses: []\n"), testProfiles)
	if err == nil || !strings.Contains(err.Error(), `s.yaml:1:1: site: missing required field "site"`) {
		t.Fatalf("got %v", err)
	}
}

func TestProfilesDirRelativeToSiteFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	over := strings.Replace(windProfile, "scale: 0.1", "scale: 0.01", 1)
	if err := os.WriteFile(filepath.Join(dir, "profiles", "wind.yaml"), []byte(over), 0o644); err != nil {
		t.Fatal(err)
	}
	src := withSiteProfiles
	site := filepath.Join(dir, "site.yaml")
	c, err := Parse(site, []byte("profiles_dir: profiles\n"+good), src)
	if err != nil {
		t.Fatal(err)
	}
	if got := *c.Profiles["wind"].Registers[0].Scale; got != 0.01 {
		t.Fatalf("site profile did not override the embedded one: scale %v", got)
	}
	_, err = Parse(site, []byte("profiles_dir: nowhere\n"+good), src)
	if err == nil || !strings.Contains(err.Error(), "site.yaml:1:15: profiles_dir:") {
		t.Fatalf("missing profiles_dir: %v", err)
	}
}

// Any bytes as a site file: an error or a config, never a panic, and every
// error is positioned in the file.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(good + "uplink: {upstreams: [{url: 'mqtt://h'}]}\nbuffer: {max_bytes: 1MiB}\n"))
	f.Add([]byte("site: {id: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("site.yaml", data, testProfiles)
		if err == nil {
			if c == nil || c.Location == nil {
				t.Fatal("no error and no config")
			}
			return
		}
		if es, ok := yamlconf.IsErrors(err); ok {
			for _, e := range es {
				if e.File != "site.yaml" {
					t.Fatalf("error without the file: %v", e)
				}
			}
		}
	})
}

func TestMetricsTokenFile(t *testing.T) {
	for _, tc := range []struct{ file, add, want string }{
		{"/etc/fieldlink/site.yaml", "", "/var/lib/fieldlink/status-token"},
		{"/etc/fieldlink/site.yaml", "buffer: {path: /data/gw/buf.db}\n", "/data/gw/status-token"},
		{"/etc/fieldlink/site.yaml", "buffer: {path: buf.db}\n", "/etc/fieldlink/status-token"},
		{"/etc/fieldlink/site.yaml", "metrics: {allow_remote: true, listen: '0.0.0.0:9273', token_file: tok}\n", "/etc/fieldlink/tok"},
		{"/etc/fieldlink/site.yaml", "metrics: {token_file: /run/fl/tok}\n", "/run/fl/tok"},
	} {
		c, err := Parse(tc.file, []byte(good+tc.add), testProfiles)
		if err != nil {
			t.Fatalf("%q: %v", tc.add, err)
		}
		if c.Metrics.TokenFile != tc.want {
			t.Errorf("%q: token file %q, want %q", tc.add, c.Metrics.TokenFile, tc.want)
		}
	}
}

func TestScrapeTokenWithoutRemoteWarns(t *testing.T) {
	for _, tc := range []struct {
		add  string
		warn bool
	}{
		{"metrics: {scrape_token: true}\n", true},
		{"metrics: {scrape_token: true, allow_remote: true, listen: '0.0.0.0:9273'}\n", false},
		{"metrics: {scrape_token: false}\n", false},
	} {
		c, err := Parse("site.yaml", []byte(good+tc.add), testProfiles)
		if err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(strings.Join(c.Warnings, "\n"), "scrape_token has no effect")
		if warned != tc.warn || (tc.add == "metrics: {scrape_token: true, allow_remote: true, listen: '0.0.0.0:9273'}\n" && !c.Metrics.ScrapeToken) {
			t.Errorf("%q: warned %v, want %v (%q)", tc.add, warned, tc.warn, c.Warnings)
		}
	}
}

// A profile with errors does not hide the site file's own: both show in one
// run, and a device that uses the broken profile is not called unknown.
func TestProfileErrorsAndSiteErrorsTogether(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(windProfile, "scale: 0.1", "scale: lots", 1)
	if err := os.WriteFile(filepath.Join(dir, "profiles", "gust.yaml"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	src := withSiteProfiles
	site := filepath.Join(dir, "site.yaml")
	text := "profiles_dir: profiles\n" + strings.Replace(good, "profile: wind, slave: 2}", "profile: gust, slave: 2, intervall: 5s}", 1)
	_, err := Parse(site, []byte(text), src)
	if err == nil || !strings.Contains(err.Error(), "gust.yaml") || !strings.Contains(err.Error(), "intervall") || strings.Contains(err.Error(), `unknown profile "gust"`) {
		t.Fatalf("want the profile's error and the site file's together, no unknown profile:\n%v", err)
	}
}

// A time zone that does not load says what to do: name it right, or, on a
// system without a time zone database (the field binary carries none),
// install one.
func TestTimezoneHint(t *testing.T) {
	bad := strings.Replace(good, "timezone: Asia/Shanghai", "timezone: Asia/Nowhere", 1)
	_, err := Parse("site.yaml", []byte(bad), testProfiles)
	if err == nil || !strings.Contains(err.Error(), `unknown time zone "Asia/Nowhere" (use an IANA name`) {
		t.Fatalf("got %v", err)
	}
	defer func(d string) { zoneinfoDir = d }(zoneinfoDir)
	zoneinfoDir = filepath.Join(t.TempDir(), "zoneinfo")
	t.Setenv("ZONEINFO", "")
	_, err = Parse("site.yaml", []byte(bad), testProfiles)
	if err == nil || !strings.Contains(err.Error(), "install the tzdata package") {
		t.Fatalf("got %v", err)
	}
}

// withSiteProfiles is the test profiles plus those of dir, as the
// production source gives the embedded ones plus profiles_dir.
func withSiteProfiles(dir string) (profile.Set, error) {
	base, _ := testProfiles("")
	site, err := profile.Load(nil, dir)
	for k, v := range site {
		base[k] = v
	}
	return base, err
}
