package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReloadDiffs checks what a reload rebuilds and what it refuses.
func TestDiff(t *testing.T) {
	base := func() *Config {
		c := &Config{Site: Site{ID: "1"}, Gateway: Gateway{ID: "g"},
			Buses:  []Bus{{Name: "b", URL: "tcp://127.0.0.1:502"}},
			Uplink: &Uplink{Selector: "soa", Upstreams: []Upstream{{URL: "mqtt://a:1883"}}}}
		return c
	}
	a := base()
	for _, tc := range []struct {
		name            string
		edit            func(c *Config)
		sensors, uplink bool
		restart         string
	}{
		{"same", func(*Config) {}, false, false, ""},
		{"bus url", func(c *Config) { c.Buses[0].URL = "tcp://127.0.0.1:503" }, true, false, ""},
		{"gateway id", func(c *Config) { c.Gateway.ID = "h" }, true, true, ""},
		{"upstream added", func(c *Config) {
			c.Uplink.Upstreams = append(c.Uplink.Upstreams, Upstream{URL: "mqtt://b:1883"})
		}, false, true, ""},
		{"selector", func(c *Config) { c.Uplink.Selector = "p2c_ewma" }, false, true, ""},
		{"password env", func(c *Config) {
			t.Setenv("RELOAD_TEST_PW", "changed")
			c.Uplink.Upstreams[0].PasswordEnv = "RELOAD_TEST_PW"
		}, false, true, ""},
		{"buffer", func(c *Config) { c.Buffer.Path = "/elsewhere.db" }, false, false, "buffer"},
		{"metrics", func(c *Config) { c.Metrics.Listen = "off" }, false, false, "metrics"},
		{"uplink removed", func(c *Config) { c.Uplink = nil }, false, true, "uplink added or removed"},
		{"remote_config added", func(c *Config) { c.RemoteConfig = &RemoteConfig{URL: "https://x/b", Keys: []string{"k.pub"}} }, false, false, "remote_config added or removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			tc.edit(b)
			d := Diff(a, b)
			if d.Sensors != tc.sensors {
				t.Errorf("Sensors = %v, want %v", d.Sensors, tc.sensors)
			}
			if d.Uplink != tc.uplink {
				t.Errorf("Uplink = %v, want %v", d.Uplink, tc.uplink)
			}
			if got := strings.Join(d.Restart, ", "); got != tc.restart {
				t.Errorf("Restart = %q, want %q", got, tc.restart)
			}
		})
	}
}

// The remote configuration's url, interval, keys and probation are taken
// by a reload (its manager rereads them); its topics rebuild the uplink.
func TestDiffRemoteConfig(t *testing.T) {
	rc := func() *Config {
		return &Config{Site: Site{ID: "1"}, Gateway: Gateway{ID: "g"}, Uplink: &Uplink{},
			RemoteConfig: &RemoteConfig{URL: "https://x/b", Keys: []string{"a.pub"}, PullTopic: "p", StateTopic: "s"}}
	}
	a := rc()
	b := rc()
	b.RemoteConfig.Keys = []string{"a.pub", "b.pub"}
	b.RemoteConfig.URL, b.RemoteConfig.Interval, b.RemoteConfig.Probation = "https://y/b", 1, 2
	if d := Diff(a, b); len(d.Restart) != 0 || d.Uplink || d.Sensors {
		t.Errorf("keys, url, interval, probation: %+v; want nothing rebuilt, no restart", d)
	}
	b = rc()
	b.RemoteConfig.PullTopic = "q"
	if d := Diff(a, b); len(d.Restart) != 0 || !d.Uplink {
		t.Errorf("pull_topic: %+v; want the uplink rebuilt", d)
	}
}

// TestFileDigests: every file the site file names counts, by its content,
// in the digest of the part that reads it; the site file itself does not
// change.
func TestFileDigests(t *testing.T) {
	dir := t.TempDir()
	c := &Config{File: filepath.Join(dir, "site.yaml"),
		Uplink: &Uplink{Upstreams: []Upstream{
			{URL: "mqtts://a:8883", PasswordFile: "pw", TLS: &TLS{CA: "ca.pem", Cert: "cert.pem", Key: "key.pem"}},
			{URL: "https://b/ingest", TokenFile: filepath.Join(dir, "token"), HeadersFile: "headers"}, // absolute, or relative to the site file
		}},
		Downlink:     Downlink{Keys: []string{"cmd.pub"}},
		RemoteConfig: &RemoteConfig{URL: "https://x/b", Keys: []string{"fleet.pub"}},
	}
	uplinkFiles := []string{"pw", "ca.pem", "cert.pem", "key.pem", "token", "headers"}
	keyFiles := []string{"cmd.pub", "fleet.pub"}
	for _, f := range append(uplinkFiles, keyFiles...) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f+" v1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for _, f := range uplinkFiles {
		want = append(want, filepath.Join(dir, f))
	}
	if got := c.UplinkFiles(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("UplinkFiles = %v, want %v", got, want)
	}
	for _, f := range append(uplinkFiles, keyFiles...) {
		up, keys := UplinkDigest(c), KeysDigest(c)
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f+" v2\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		isKey := strings.HasSuffix(f, ".pub")
		if changed := UplinkDigest(c) != up; changed == isKey {
			t.Errorf("%s rewritten: uplink digest changed %v, want %v", f, changed, !isKey)
		}
		if changed := KeysDigest(c) != keys; changed != isKey {
			t.Errorf("%s rewritten: keys digest changed %v, want %v", f, changed, isKey)
		}
	}
	up := UplinkDigest(c)
	if err := os.Remove(filepath.Join(dir, "headers")); err != nil {
		t.Fatal(err)
	}
	if UplinkDigest(c) == up {
		t.Error("a file gone does not change the uplink digest")
	}
}
