package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/profile"
)

// errorClasses is every class of site file error, as the user makes it:
// the good file with old replaced by new (or new appended when old is
// empty, or src as the whole file). Each must be reported at pos
// (line:col) against field, with a message that says what would be valid.
// docs/config-errors.md lists the same classes.
var errorClasses = []struct {
	class    string
	old, new string
	src      string // the whole file instead, when set
	pos      string // line:col
	field    string // "" for the whole file
	valid    string // the part of the message naming what is valid
}{
	{class: "YAML syntax", old: "gateway: {id: gw-01}", new: "gateway: {id: gw-01", pos: "1:1", valid: "did not find expected ',' or '}'"},
	{class: "empty file", src: "# nothing yet\n", valid: "file is empty (expected key: value lines)"},
	{class: "unknown key", old: "slave: 2}", new: "slave: 2, intervall: 5s}", pos: "9:55", field: "buses[0].devices[1].intervall", valid: `(did you mean "interval"?) (valid: name, profile, slave, interval, data_type, writable, points, deadband, deadband_percent, heartbeat)`},
	{class: "wrong type: number", old: "slave: 2}", new: "slave: two}", pos: "9:52", field: "buses[0].devices[1].slave", valid: `expected a whole number, got "two"`},
	{class: "wrong type: list", old: "devices:\n      - {name: wind-tcp, profile: wind, slave: 1}", new: "devices: {name: wind-tcp, profile: wind, slave: 1}", pos: "12:14", field: "buses[1].devices", valid: "expected a list, got a mapping"},
	{class: "wrong type: boolean", new: "metrics: {allow_remote: sometimes}", pos: "16:25", field: "metrics.allow_remote", valid: `expected true or false, got "sometimes"`},
	{class: "wrong type: mapping", new: "packet: strings", pos: "16:9", field: "packet", valid: `expected a mapping (key: value lines), got "strings"`},
	{class: "missing required field", old: "{name: anemometer-2, profile: wind, slave: 2}", new: "{name: anemometer-2, slave: 2}", pos: "9:9", field: "buses[0].devices[1].profile", valid: `missing required field "profile"`},
	{class: "duplicate key", old: "timeout: 300ms", new: "timeout: 300ms\n    timeout: 1s", pos: "7:5", field: "buses[0].timeout", valid: "a key may appear once; the first is on line 6"},
	{class: "out of range: slave id", old: "slave: 2}", new: "slave: 300}", pos: "9:52", field: "buses[0].devices[1].slave", valid: "must be 1..247 (0 is broadcast, 248-255 reserved), got 300"},
	{class: "out of range: timeout", old: "timeout: 300ms", new: "timeout: 2m", pos: "6:14", field: "buses[0].timeout", valid: "must be between 1ms and 1m0s, got 2m0s"},
	{class: "out of range: max_gap", old: "timeout: 300ms", new: "timeout: 300ms\n    max_gap: 200", pos: "7:14", field: "buses[0].max_gap", valid: "must be 0..124 registers, got 200"},
	{class: "out of range: qos", new: "uplink: {upstreams: [{url: 'mqtt://h', qos: 2}]}", pos: "16:45", field: "uplink.upstreams[0].qos", valid: "must be 0 or 1"},
	{class: "out of range: window", new: "uplink: {window: 70000, upstreams: [{url: 'mqtt://h'}]}", pos: "16:18", field: "uplink.window", valid: "must be 1..65535, got 70000"},
	{class: "out of range: weight", new: "uplink: {upstreams: [{url: 'mqtt://h', weight: 5000}]}", pos: "16:48", field: "uplink.upstreams[0].weight", valid: "must be 1..1000, got 5000"},
	{class: "interval too short", old: "interval: 5s, data_type", new: "interval: 50ms, data_type", pos: "8:65", field: "buses[0].devices[0].interval", valid: "must be at least 100ms, got 50ms"},
	{class: "negative duration", new: "buffer: {max_age: -1h}", pos: "16:19", field: "buffer.max_age", valid: "must be 0 (keep packets until delivered) or positive, got -1h0m0s"},
	{class: "backoff below timeout", old: "timeout: 300ms", new: "timeout: 300ms\n    backoff: 100ms", pos: "7:14", field: "buses[0].backoff", valid: "must be at least the timeout (300ms), got 100ms"},
	{class: "bad duration", old: "timeout: 300ms", new: "timeout: 300", pos: "6:14", field: "buses[0].timeout", valid: `expected a duration such as 500ms or 5s, got "300"`},
	{class: "bad size", new: "buffer: {max_bytes: lots}", pos: "16:21", field: "buffer.max_bytes", valid: `expected a size such as 256MiB or 1GiB, got "lots"`},
	{class: "size too small", new: "buffer: {max_bytes: 1KiB}", pos: "16:21", field: "buffer.max_bytes", valid: "must be at least 64KiB, got 1024 bytes"},
	{class: "bad enum: id_field", old: "id_field: MineId", new: "id_field: PlantId", pos: "1:29", field: "site.id_field", valid: `must be FarmId or MineId, got "PlantId"`},
	{class: "bad enum: packet.values", new: "packet: {values: numbers}", pos: "16:18", field: "packet.values", valid: `must be strings or number, got "numbers"`},
	{class: "bad enum: buffer.durability", new: "buffer: {durability: sometimes}", pos: "16:22", field: "buffer.durability", valid: `must be always or interval, got "sometimes"`},
	{class: "bad enum: uplink.selector", new: "uplink: {selector: fastest, upstreams: [{url: 'mqtt://h'}]}", pos: "16:20", field: "uplink.selector", valid: `(valid: cswlc, drf, drf_cswlc, irlb, least_conn, load_aware, p2c_ewma, prequal`},
	{class: "unknown time zone", old: "Asia/Shanghai", new: "Asia/Shanghia", pos: "1:47", field: "site.timezone", valid: "use an IANA name such as Asia/Shanghai or UTC"},
	{class: "bad bus URL: scheme", old: "tcp://127.0.0.1:1502", new: "udp://127.0.0.1:1502", pos: "11:10", field: "buses[1].url", valid: `unknown scheme "udp" (valid: rtu, tcp, rtuovertcp)`},
	{class: "bad bus URL: setting", old: "stop_bits=1", new: "stopbits=1", pos: "5:10", field: "buses[0].url", valid: `unknown query key "stopbits" (valid keys: baud, parity, data_bits, stop_bits)`},
	{class: "bad bus URL: value", old: "parity=N", new: "parity=X", pos: "5:10", field: "buses[0].url", valid: `query key "parity" = "X": must be N, E or O`},
	{class: "bad serial sensor URL", old: "serial:///dev/ttyS1?baud=4800", new: "serial:///dev/ttyS1?baud=fast", pos: "15:23", field: "serial_sensors[0].url", valid: `baud must be a number such as 4800 or 9600, got "fast"`},
	{class: "bad upstream URL: scheme", new: "uplink: {upstreams: [{url: 'ftp://h'}]}", pos: "16:28", field: "uplink.upstreams[0].url", valid: `unknown scheme "ftp" in "ftp://h" (valid: mqtt, mqtts, http, https)`},
	{class: "bad upstream URL: credentials", new: "uplink: {upstreams: [{url: 'mqtt://gw:s3cret@h'}]}", pos: "16:28", field: "uplink.upstreams[0].url", valid: "put credentials in username and password_file, not in the URL"},
	{class: "bad upstream URL: no host", new: "uplink: {upstreams: [{url: 'mqtts:///api'}]}", pos: "16:28", field: "uplink.upstreams[0].url", valid: "(such as mqtts://host:8883 or https://host/api/packets)"},
	{class: "unknown profile", old: "profile: wind, slave: 2", new: "profile: wnd, slave: 2", pos: "9:39", field: "buses[0].devices[1].profile", valid: `(did you mean "wind"?) (nearest: wind, nmea-wind; gateway profiles lists them all)`},
	{class: "profile of the wrong kind", old: "profile: wind, slave: 2", new: "profile: nmea-wind, slave: 2", pos: "9:39", field: "buses[0].devices[1].profile", valid: "put the device under serial_sensors"},
	{class: "duplicate device name", old: "name: wind-tcp", new: "name: anemometer-1", pos: "13:16", field: "buses[1].devices[0].name", valid: "is already used by buses[0].devices[0].name (device names become DeviceId and must be unique)"},
	{class: "duplicate bus name", old: "name: plc", new: "name: field-a", pos: "10:11", field: "buses[1].name", valid: `bus name "field-a" is already used by buses[0] (bus names must be unique)`},
	{class: "duplicate slave id on a bus", old: "slave: 2}", new: "slave: 1}", pos: "9:52", field: "buses[0].devices[1].slave", valid: "is already used on this bus by devices[0] (each device on a bus needs its own slave id, 1..247)"},
	{class: "address collision: two buses on one port", old: "tcp://127.0.0.1:1502", new: "rtu:///dev/ttyUSB0?baud=19200", pos: "11:10", field: "buses[1].url", valid: "/dev/ttyUSB0 is already used by buses[0]: one bus per port"},
	{class: "address collision: serial sensor on a bus's port", old: "serial:///dev/ttyS1?baud=4800", new: "serial:///dev/ttyUSB0?baud=4800", pos: "15:23", field: "serial_sensors[0].url", valid: "/dev/ttyUSB0 is already used by buses[0]: one reader per port"},
	{class: "duplicate upstream", new: "uplink: {upstreams: [{url: 'mqtt://h'}, {url: 'mqtt://h'}]}", pos: "16:47", field: "uplink.upstreams[1].url", valid: "same URL as uplink.upstreams[0] (list each upstream once)"},
	{class: "bus without devices", old: "  - name: plc\n    url: tcp://127.0.0.1:1502\n    devices:\n      - {name: wind-tcp, profile: wind, slave: 1}", new: "  - name: plc\n    url: tcp://127.0.0.1:1502", pos: "10:5", field: "buses[1].devices", valid: "(list at least one under devices:, or remove the bus)"},
	{class: "nothing to poll", src: "site: {id: \"001\"}\ngateway: {id: gw-01}\n", pos: "1:1", field: "buses", valid: "the site has no buses and no serial_sensors: nothing to poll"},
	{class: "empty required value", old: `id: "001"`, new: `id: ""`, pos: "1:12", field: "site.id", valid: `must not be empty (the farm's or mine's id on the platform, such as "001")`},
	{class: "password_file missing", new: "uplink: {upstreams: [{url: 'mqtt://h', password_file: /nonexistent/mqtt.pass}]}", pos: "16:55", field: "uplink.upstreams[0].password_file", valid: "(give a file the gateway can read, whose first line is the password)"},
	{class: "password_file is a directory", new: "uplink: {upstreams: [{url: 'mqtt://h', password_file: /}]}", pos: "16:55", field: "uplink.upstreams[0].password_file", valid: "/ is a directory (give a file the gateway can read"},
	{class: "password_env not set", new: "uplink: {upstreams: [{url: 'mqtt://h', password_env: FIELDLINK_UNSET_PW}]}", pos: "16:54", field: "uplink.upstreams[0].password_env", valid: "environment variable FIELDLINK_UNSET_PW is not set (set it in the gateway's environment, or use password_file)"},
	{class: "password_file and password_env", new: "uplink: {upstreams: [{url: 'mqtt://h', password_env: FIELDLINK_SET_PW, password_file: pw}]}", pos: "16:54", field: "uplink.upstreams[0].password_env", valid: "give password_file or password_env, not both"},
	{class: "encoding unknown", new: "uplink: {upstreams: [{url: 'https://h', encoding: csv}]}", pos: "16:51", field: "uplink.upstreams[0].encoding", valid: `unknown encoding "csv" for an HTTP upstream (valid: json, influx_line)`},
	{class: "influx_line URL without db", new: "uplink: {upstreams: [{url: 'http://h:8086/write', encoding: influx_line}]}", pos: "16:28", field: "uplink.upstreams[0].url", valid: "InfluxDB 1.x's /write needs db in the query (such as /write?db=farm)"},
	{class: "token_file missing", new: "uplink: {upstreams: [{url: 'https://h', token_file: /nonexistent/token}]}", pos: "16:53", field: "uplink.upstreams[0].token_file", valid: "(give a file the gateway can read, whose first line is the token)"},
	{class: "token_file on MQTT", new: "uplink: {upstreams: [{url: 'mqtt://h', token_file: pw}]}", pos: "16:52", field: "uplink.upstreams[0].token_file", valid: "applies only to http:// and https:// upstreams"},
	{class: "headers_file not headers", new: "uplink: {upstreams: [{url: 'https://h', headers_file: pw}]}", pos: "16:55", field: "uplink.upstreams[0].headers_file", valid: "pw: line 1: not a header (write Name: value) (give a file the gateway can read, one \"Name: value\" a line)"},
	{class: "tls on a plain URL", new: "uplink: {upstreams: [{url: 'mqtt://h', tls: {ca: ca.pem}}]}", pos: "16:45", field: "uplink.upstreams[0].tls", valid: "tls needs an mqtts:// or https:// URL"},
	{class: "tls cert without key", new: "uplink: {upstreams: [{url: 'mqtts://h', tls: {cert: ca.pem}}]}", pos: "16:46", field: "uplink.upstreams[0].tls.key", valid: "a client certificate needs both cert and key"},
	{class: "tls file missing", new: "uplink: {upstreams: [{url: 'mqtts://h', tls: {ca: /nonexistent/ca.pem}}]}", pos: "16:51", field: "uplink.upstreams[0].tls.ca", valid: "(give a PEM file the gateway can read)"},
	{class: "setting for another mode", new: "buffer: {sync_every: 2s}", pos: "16:22", field: "buffer.sync_every", valid: "applies only with durability: interval"},
	{class: "topic on an HTTP upstream", new: "uplink: {upstreams: [{url: 'https://h', topic: t}]}", pos: "16:48", field: "uplink.upstreams[0].topic", valid: "topic applies only to mqtt:// and mqtts:// upstreams"},
	{class: "load source", new: "uplink: {upstreams: [{url: 'mqtt://h', load: {}}]}", pos: "16:46", field: "uplink.upstreams[0].load", valid: "give url (an HTTP JSON endpoint) or topic (a retained MQTT topic), one of them"},
	{class: "registry URL", new: "uplink: {registry: {url: 'mqtt://r'}}", pos: "16:26", field: "uplink.registry.url", valid: "must be an http:// or https:// URL"},
	{class: "metrics listen: not loopback", new: "metrics: {listen: '0.0.0.0:9273'}", pos: "16:19", field: "metrics.listen", valid: "use one such as 127.0.0.1:9273, or set metrics.allow_remote: true"},
	{class: "metrics listen: not host:port", new: "metrics: {listen: '9273'}", pos: "16:19", field: "metrics.listen", valid: "(valid: host:port such as 127.0.0.1:9273, or off)"},
	{class: "profiles_dir missing", src: "profiles_dir: nowhere\n" + good, pos: "1:15", field: "profiles_dir", valid: "nowhere"},
}

// Every class of error names the file, line and column, the field, and
// what would be valid.
func TestEveryErrorClass(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "site.yaml")
	for _, f := range []string{"pw", "ca.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FIELDLINK_SET_PW", "x")
	profiles := func(d string) (profile.Set, error) {
		set, err := testProfiles("")
		if d != "" {
			if _, serr := os.Stat(d); serr != nil {
				return set, serr
			}
		}
		return set, err
	}
	for _, tc := range errorClasses {
		t.Run(tc.class, func(t *testing.T) {
			src := tc.src
			switch {
			case src != "":
			case tc.old == "":
				src = good + tc.new + "\n"
			default:
				src = strings.Replace(good, tc.old, tc.new, 1)
				if src == good {
					t.Fatal("the case does not change the file")
				}
			}
			_, err := Parse(site, []byte(src), profiles)
			es, ok := yamlconf.IsErrors(err)
			if !ok {
				t.Fatalf("want positioned errors, got %v", err)
			}
			var e *yamlconf.Error
			for _, x := range es {
				if x.Field == tc.field && strings.Contains(x.Msg, tc.valid) {
					e = x
					break
				}
			}
			if e == nil {
				t.Fatalf("no error at field %q saying %q; got:\n%v", tc.field, tc.valid, err)
			}
			pos := ""
			if e.Line > 0 {
				pos = strings.Join([]string{itoa(e.Line), itoa(e.Col)}, ":")
			}
			if e.File != site || pos != tc.pos {
				t.Errorf("error at %s:%s, want %s:%s: %v", e.File, pos, site, tc.pos, e)
			}
			want := site + ":"
			if tc.pos != "" {
				want += tc.pos + ":"
			}
			if tc.field != "" {
				want += " " + tc.field + ":"
			}
			if !strings.HasPrefix(e.Error(), want) {
				t.Errorf("message %q does not start with %q", e.Error(), want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the message repeats a password from the file: %v", err)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A value that cannot be decoded is reported once: the checks of the zero
// value left in its place stay quiet, and a missing profiles_dir does not
// make every profile unknown.
func TestNoFollowOnErrors(t *testing.T) {
	missingDir := func(d string) (profile.Set, error) {
		set, _ := testProfiles("")
		if d != "" {
			return nil, os.ErrNotExist
		}
		return set, nil
	}
	for _, tc := range []struct{ name, src string }{
		{"wrong type", strings.Replace(good, "slave: 2}", "slave: two}", 1)},
		{"not a list", strings.Replace(good, "devices:\n      - {name: wind-tcp, profile: wind, slave: 1}", "devices: {name: wind-tcp, profile: wind, slave: 1}", 1)},
		{"profiles_dir", "profiles_dir: nowhere\n" + good},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("site.yaml", []byte(tc.src), missingDir)
			es, ok := yamlconf.IsErrors(err)
			if !ok || len(es) != 1 {
				t.Fatalf("want exactly one error, got %v", err)
			}
		})
	}
}
