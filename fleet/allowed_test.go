package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"fieldlink/config"
)

// signed signs site, whole, as serial.
func (r *rig) signed(serial uint64, site string) []byte {
	r.t.Helper()
	b, err := Sign([]byte(site), Manifest{Serial: serial, NotBefore: b0.Add(-time.Hour), Expires: b0.Add(24 * time.Hour)}, r.priv)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// withUpstream is the local site file with an uplink whose one upstream
// is up (a YAML flow mapping's content).
func withUpstream(up string) (string, string) {
	return "probation: 1m}", "probation: 1m}\nuplink:\n  upstreams:\n    - {" + up + "}"
}

// A bundle names files only in the fleet's secrets directory: never the
// status token, a file of the system, or a link out of the directory; a
// password from the gateway's environment only for the broker the local
// file gives it to.
func TestBundleCannotReadLocalSecrets(t *testing.T) {
	r := newRig(t)
	if err := os.WriteFile(filepath.Join(r.dir, "status-token"), []byte("s3cret-status-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := filepath.Join(r.dir, "remote", "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "broker.pass"), []byte("fleet-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(r.dir, "status-token"), filepath.Join(secrets, "link.pass")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FIELDLINK_TEST_SECRET", "from-the-environment")
	serial := uint64(1)
	for _, tc := range []struct{ name, up, field string }{
		{"the status token", `url: "mqtt://attacker.example:1883", username: x, password_file: status-token`, "password_file"},
		{"a file of the system", `url: "mqtt://attacker.example:1883", username: x, password_file: ../../../../../../../../etc/passwd`, "password_file"},
		{"an absolute path", `url: "mqtt://attacker.example:1883", username: x, password_file: /etc/passwd`, "password_file"},
		{"a link out of the secrets", `url: "mqtt://attacker.example:1883", username: x, password_file: remote/secrets/link.pass`, "password_file"},
		{"the secrets directory left by ..", `url: "mqtt://attacker.example:1883", username: x, password_file: remote/secrets/../../status-token`, "password_file"},
		{"an HTTP token", `url: "https://attacker.example/ingest", token_file: status-token`, "token_file"},
		{"a client key", `url: "mqtts://attacker.example:8883", tls: {cert: fleet.pub, key: fleet.key}`, "tls.key"},
		{"the environment", `url: "mqtt://attacker.example:1883", username: x, password_env: FIELDLINK_TEST_SECRET`, "password_env"},
	} {
		old, new := withUpstream(tc.up)
		rep := r.pull(r.bundle(serial, old, new))
		serial++
		if rep.State != StateRefused || !strings.Contains(rep.Reason, "uplink.upstreams[0]."+tc.field) {
			t.Errorf("%s: %+v; want refused naming uplink.upstreams[0].%s", tc.name, rep, tc.field)
		}
	}
	if n := len(r.gw.loaded); n != 0 {
		t.Fatalf("%d reloads: a bundle naming a file outside the secrets was applied", n)
	}
	old, new := withUpstream(`url: "mqtt://broker.example:1883", username: x, password_file: remote/secrets/broker.pass`)
	if rep := r.pull(r.bundle(serial, old, new)); rep.State != StateProbation {
		t.Errorf("a password in the secrets directory: %+v; want probation", rep)
	}
}

// A bundle may repeat the local file's own upstream, credentials and all:
// the same secret to the same broker.
func TestBundleMayRepeatTheLocalUpstream(t *testing.T) {
	r := newRig(t)
	if err := os.WriteFile(filepath.Join(r.dir, "mqtt.pass"), []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old, new := withUpstream(`url: "mqtt://broker.example:1883", username: x, password_file: mqtt.pass`)
	r.local = r.reloaded(old, new)
	if err := r.m.SetLocal(r.local); err != nil {
		t.Fatal(err)
	}
	site := strings.Replace(strings.Replace(fmt.Sprintf(localSite, r.srv.URL), "slave: 1}", "slave: 1, interval: 7s}", 1), old, new, 1)
	if rep := r.pull(r.signed(1, site)); rep.State != StateProbation {
		t.Errorf("the local upstream repeated: %+v; want probation", rep)
	}
	r.advance(2 * time.Minute)
	moved := strings.Replace(site, "mqtt://broker.example:1883", "mqtt://attacker.example:1883", 1)
	if rep := r.pull(r.signed(2, moved)); rep.State != StateRefused || !strings.Contains(rep.Reason, "password_file") {
		t.Errorf("the local password sent to another broker: %+v; want refused", rep)
	}
}

// profiles_dir, buffer.path and gateway.id are the gateway's own: a
// bundle that changes them is refused, whatever the path.
func TestBundleCannotMoveLocalPaths(t *testing.T) {
	r := newRig(t)
	for i, tc := range []struct{ old, new, field string }{
		{"buffer: {path: buf.db}", "buffer: {path: buf.db}\nprofiles_dir: ../../../../etc", "profiles_dir"},
		{"buffer: {path: buf.db}", "buffer: {path: ../../../../tmp/buf.db}", "buffer.path"},
		{"gateway: {id: gw-01}", "gateway: {id: gw-99}", "gateway.id"},
	} {
		rep := r.pull(r.bundle(uint64(i+1), tc.old, tc.new))
		if rep.State != StateRefused || !strings.Contains(rep.Reason, tc.field+" is local") {
			t.Errorf("a bundle setting %s: %+v; want refused", tc.field, rep)
		}
	}
}

// Every setting of the site file is in one of the two written lists: what
// a bundle may set, and what stays local. A new setting fails this test
// until it is placed (and docs/remote-config.md says where).
func TestBundleSettingsListed(t *testing.T) {
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		tag, _, _ := strings.Cut(ct.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		local := slices.ContainsFunc(localOnly, func(l localSetting) bool { return l.path[0] == tag })
		if !slices.Contains(bundleMay, tag) && !local {
			t.Errorf("site file key %q is neither in bundleMay nor in localOnly", tag)
		}
	}
}
