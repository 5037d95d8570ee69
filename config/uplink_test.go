package config

import (
	"errors"
	"fieldlink/buffer"
	"fieldlink/uplink"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"
)

func TestBufferAndUplinkDefaults(t *testing.T) {
	c, err := Parse("/etc/fieldlink/site.yaml", []byte(good+`buffer: {path: buf.db, durability: interval, max_bytes: 64MiB}
uplink:
  upstreams:
    - url: mqtt://127.0.0.1:1883
    - {url: "https://ingest.example.com/api/packets", weight: 3}
`), testProfiles)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Buffer
	if b.Path != "/etc/fieldlink/buf.db" || b.SyncEvery != time.Second || b.MaxBytes != 64<<20 || b.WhenFull.String() != "drop_oldest" || b.Order.String() != "oldest_first" {
		t.Fatalf("buffer %+v", b)
	}
	u := c.Uplink
	if u.StatusTopic != "fieldlink/{site}/{gateway}/status" || u.Batch != 50 || u.ProbeTopic != "fieldlink-probe/{site}/{gateway}" {
		t.Errorf("status topic %q, batch %d, probe topic %q: want the defaults", u.StatusTopic, u.Batch, u.ProbeTopic)
	}
	if u.Selector != "drf_cswlc" || u.Window != 64 || u.Probe.Interval != 10*time.Second || u.Upstreams[0].Topic != "fieldlink/{site}/{gateway}/{data_type}" || *u.Upstreams[0].QoS != 1 || u.Upstreams[1].Weight != 3 {
		t.Fatalf("uplink %+v %+v", u, u.Upstreams)
	}
	for _, st := range []string{"off", "farms/{site}/{gateway}/alive"} {
		c, err := Parse("site.yaml", []byte(good+"uplink: {status_topic: '"+st+"', upstreams: [{url: 'mqtt://h'}]}\n"), testProfiles)
		if err != nil || c.Uplink.StatusTopic != st {
			t.Errorf("status_topic %s: %v, %+v", st, err, c)
		}
	}
	for _, pt := range []string{"off", "farms/{site}/{gateway}/probe"} {
		c, err := Parse("site.yaml", []byte(good+"uplink: {probe_topic: '"+pt+"', upstreams: [{url: 'mqtt://h'}]}\n"), testProfiles)
		if err != nil || c.Uplink.ProbeTopic != pt {
			t.Errorf("probe_topic %s: %v, %+v", pt, err, c)
		}
	}
	c, err = Parse("site.yaml", []byte(good), testProfiles)
	if err != nil || c.Buffer.Path != DefaultBufferPath || c.Buffer.Durability.String() != "always" || c.Uplink != nil {
		t.Fatalf("defaults without the sections: %+v %v", c.Buffer, err)
	}
}

func TestUplinkErrors(t *testing.T) {
	t.Setenv("FIELDLINK_TEST_PW", "x")
	for _, tc := range []struct{ add, want string }{
		{"buffer: {durability: sometimes}", `buffer.durability: must be always or interval, got "sometimes"`},
		{"buffer: {sync_every: 2s}", `buffer.sync_every: applies only with durability: interval`},
		{"buffer: {max_bytes: lots}", `buffer.max_bytes: expected a size such as 256MiB or 1GiB, got "lots"`},
		{"buffer: {max_bytes: 1KiB}", `buffer.max_bytes: must be at least 64KiB`},
		{"buffer: {when_full: explode}", `buffer.when_full: must be drop_oldest or reject_new`},
		{"buffer: {order: random}", `buffer.order: must be oldest_first or newest_first`},
		{"uplink: {selector: fastest, upstreams: [{url: 'mqtt://h'}]}", `uplink.selector: unknown selector "fastest" (valid: cswlc, drf, drf_cswlc,`},
		{"uplink: {upstreams: []}", `uplink.upstreams: give at least one upstream, or a registry`},
		{"uplink: {upstreams: [{url: 'ftp://h'}]}", `uplink.upstreams[0].url: unknown scheme "ftp"`},
		{"uplink: {upstreams: [{url: 'mqtt://u:p@h'}]}", `put credentials in username and password_file, not in the URL`},
		{"uplink: {upstreams: [{url: 'mqtt://h', qos: 2}]}", `uplink.upstreams[0].qos: must be 0 or 1`},
		{"uplink: {upstreams: [{url: 'https://h', topic: t}]}", `uplink.upstreams[0].topic: topic applies only to mqtt`},
		{"uplink: {upstreams: [{url: 'mqtt://h', password_file: /nonexistent/pw}]}", `uplink.upstreams[0].password_file: open /nonexistent/pw: no such file or directory (give a file the gateway can read`},
		{"uplink: {upstreams: [{url: 'mqtt://h', password_env: FIELDLINK_NOT_SET_X}]}", `uplink.upstreams[0].password_env: environment variable FIELDLINK_NOT_SET_X is not set`},
		{"uplink: {upstreams: [{url: 'mqtt://h', password_env: FIELDLINK_TEST_PW, password_file: /x}]}", `give password_file or password_env, not both`},
		{"uplink: {upstreams: [{url: 'mqtt://h', tls: {ca: /x.pem}}]}", `uplink.upstreams[0].tls: tls needs an mqtts:// or https:// URL`},
		{"uplink: {upstreams: [{url: 'mqtts://h', tls: {cert: /c.pem}}]}", `uplink.upstreams[0].tls.key: a client certificate needs both cert and key`},
		{"uplink: {upstreams: [{url: 'mqtt://h', load: {}}]}", `uplink.upstreams[0].load: give url`},
		{"uplink: {upstreams: [{url: 'https://h', load: {topic: x}}]}", `uplink.upstreams[0].load.topic: a load topic needs an MQTT upstream`},
		{"uplink: {registry: {url: 'mqtt://r'}}", `uplink.registry.url: must be an http:// or https:// URL`},
		{"uplink: {status_topic: 'st/{data_type}', upstreams: [{url: 'mqtt://h'}]}", `uplink.status_topic: topic variable {data_type} has no value`},
		{"uplink: {status_topic: 'st/#', upstreams: [{url: 'mqtt://h'}]}", `uplink.status_topic: "st/#": '+', '#' and NUL are not allowed`},
		{"uplink: {probe_topic: 'p/{device}', upstreams: [{url: 'mqtt://h'}]}", `uplink.probe_topic: topic variable {device} has no value`},
		{"uplink: {probe_topic: 'p/+', upstreams: [{url: 'mqtt://h'}]}", `uplink.probe_topic: "p/+": '+', '#' and NUL are not allowed`},
	} {
		_, err := Parse("site.yaml", []byte(good+tc.add+"\n"), testProfiles)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "site.yaml:16:") {
			t.Errorf("%s:\n got  %v\n want site.yaml:16:…%s", tc.add, err, tc.want)
		}
	}
}

func TestInsecureSkipVerifyIsLoud(t *testing.T) {
	c, err := Parse("site.yaml", []byte(good+"uplink: {upstreams: [{url: 'mqtts://h:8883', tls: {insecure_skip_verify: true}}]}\n"), testProfiles)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) == 0 || !strings.Contains(c.Warnings[len(c.Warnings)-1], "will NOT be verified") {
		t.Fatalf("warnings %q", c.Warnings)
	}
}

func TestUpstreamURLErrorsHideThePassword(t *testing.T) {
	for _, raw := range []string{"tcp://u:s3cret@h", "mqtt://u:s3cret@h", "mqtt://u:s3cret@h:99999x", "://u:s3cret@"} {
		_, err := UpstreamScheme(raw)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

// TestSectionDefaultsAreThePackages: the defaults the buffer and uplink
// sections take are the buffer's and the uplink's own, not copies.
func TestSectionDefaultsAreThePackages(t *testing.T) {
	c, err := Parse("site.yaml", []byte(good+"buffer: {durability: interval}\nuplink: {upstreams: [{url: 'https://h/p'}]}\n"), testProfiles)
	if err != nil {
		t.Fatal(err)
	}
	if b := c.Buffer; b.SyncEvery != buffer.DefaultSyncEvery || b.MaxBytes != buffer.DefaultMaxBytes {
		t.Errorf("buffer sync_every %v, max_bytes %d: want the buffer package's %v, %d", b.SyncEvery, b.MaxBytes, buffer.DefaultSyncEvery, buffer.DefaultMaxBytes)
	}
	u := c.Uplink
	if u.Batch != uplink.DefaultBatch || u.Window != uplink.DefaultWindow || u.Probe.Interval != uplink.DefaultProbeInterval || u.Probe.Timeout != uplink.DefaultProbeTimeout {
		t.Errorf("uplink batch %d, window %d, probe %v/%v: want the uplink package's", u.Batch, u.Window, u.Probe.Interval, u.Probe.Timeout)
	}
}

// A secret's file is read relative to the site file: its first line, with
// a Windows line end taken off too; a missing file says its path.
func TestSecret(t *testing.T) {
	dir := t.TempDir()
	c := &Config{File: dir + "/site.yaml"}
	for name, text := range map[string]string{"pass": "s3cret\nsecond line\n", "crlf": "tok\r\n", "bare": "no-end"} {
		if err := os.WriteFile(dir+"/"+name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{"pass": "s3cret", "crlf": "tok", dir + "/bare": "no-end"} {
		if got, err := c.Secret(p); err != nil || got != want {
			t.Errorf("Secret(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	if _, err := c.Secret("missing"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir+"/missing") {
		t.Errorf("Secret of a missing file: %v; want not found, naming %s/missing", err, dir)
	}
}
