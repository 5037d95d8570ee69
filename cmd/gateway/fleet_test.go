package main

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/fleet"
	"fieldlink/internal/signing"
	"fieldlink/internal/testtool"
)

// gateway config sign makes a bundle that the gateways' check accepts.
func TestConfigSign(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := gw(t, "keygen", "-o", filepath.Join(dir, "fleet")); code != 0 {
		t.Fatal(errOut)
	}
	site := filepath.Join(dir, "gw-01.yaml")
	if err := os.WriteFile(site, []byte("site: {id: \"001\"}\ngateway: {id: gw-01}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := gw(t, "config", "sign", "-key", filepath.Join(dir, "fleet.key"), "-serial", "12", "-gateway", "gw-01", "-gateway", "gw-02", "-expires", "2h", site)
	if code != 0 {
		t.Fatalf("config sign: %d %s", code, errOut)
	}
	pub, err := signing.LoadPublic(filepath.Join(dir, "fleet.pub"))
	if err != nil {
		t.Fatal(err)
	}
	m, got, err := fleet.Open([]byte(out), []ed25519.PublicKey{pub}, "gw-02", time.Now())
	if err != nil || m.Serial != 12 || string(got) != "site: {id: \"001\"}\ngateway: {id: gw-01}\n" || m.Expires.Sub(m.NotBefore) != 2*time.Hour {
		t.Fatalf("the bundle: %+v %q %v", m, got, err)
	}
	if _, _, err := fleet.Open([]byte(out), []ed25519.PublicKey{pub}, "gw-03", time.Now()); err == nil {
		t.Error("a bundle for gw-01 and gw-02 opened on gw-03")
	}
	for _, args := range [][]string{
		{"config", "sign", "-key", filepath.Join(dir, "fleet.key"), site},
		{"config", "sign", "-serial", "3", site},
		{"config"},
	} {
		if code, _, _ := gw(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := gw(t, "config", "sign", "-key", filepath.Join(dir, "fleet.pub"), "-serial", "3", site); code != 1 || !strings.Contains(errOut, "fleet.pub") {
		t.Errorf("a public key given as the private one: %d %s", code, errOut)
	}
}

// With the configuration server down at boot, gateway run starts at once
// from the last known-good bundle; a SIGHUP keeps the bundle in force.
func TestRunStartsFromTheKnownGoodBundle(t *testing.T) {
	_, emu := serve(t, false, "generic-wind-speed", "generic-tipping-bucket-rain")
	in := newReloadIngest(t)
	dir := t.TempDir()
	priv := testtool.SigningKeyFiles(t, filepath.Join(dir, "fleet"))
	local := fmt.Sprintf(`site: {id: "F1"}
gateway: {id: gw-fleet}
buses:
  - name: field
    url: tcp://%s
    devices:
      - {name: wind-1, profile: generic-wind-speed, slave: 1, interval: 100ms}
buffer: {path: buf.db}
metrics: {listen: "off"}
uplink:
  probe: {interval: 200ms, timeout: 100ms}
  upstreams: [{url: %q}]
remote_config: {url: "http://127.0.0.1:9/gw-fleet.json", keys: [fleet.pub]}
`, emu, in.URL)
	site := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(site, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	// The known-good bundle adds rain-1, as a confirmed bundle leaves it.
	remote := strings.Replace(local, "interval: 100ms}\n", "interval: 100ms}\n      - {name: rain-1, profile: generic-tipping-bucket-rain, slave: 2, interval: 100ms}\n", 1)
	if _, err := fleet.Sign([]byte(remote), fleet.Manifest{Serial: 3}, priv); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "remote")
	if err := os.MkdirAll(state, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "bundle-3.yaml"), []byte(remote), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte(`{"serial":3,"known_good":3,"state":"applied","last_serial":3}`), 0o640); err != nil {
		t.Fatal(err)
	}

	g := e2eStartGateway(t, site, io.Discard, "info")
	testtool.WaitFor(t, 30*time.Second, "rain-1 (from the known-good bundle) delivered", func() bool {
		return in.count("rain-1") >= 3 && in.count("wind-1") >= 3
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testtool.WaitFor(t, 30*time.Second, "the reload", func() bool {
		return strings.Contains(g.stderr.String(), "site file unchanged in effect") || strings.Contains(g.stderr.String(), "site file reloaded")
	})
	n := in.count("rain-1")
	testtool.WaitFor(t, 30*time.Second, "rain-1 still polled after the reload", func() bool { return in.count("rain-1") >= n+3 })
	if !strings.Contains(g.stderr.String(), "remote configuration server unreachable") {
		t.Error("the log does not say the configuration server is unreachable")
	}
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A SIGHUP that arrives while gateway run is still starting does not kill
// it. A profile of the site's profiles_dir is a FIFO, so the daemon blocks
// reading it while it loads its site file (it has caught SIGHUP by then,
// but runs nothing yet); the SIGHUP comes at that moment; once fed, the
// daemon runs, reloads as asked, and stops cleanly on SIGTERM.
func TestSIGHUPRightAfterStart(t *testing.T) {
	bin := testtool.BuildGateway(t)
	_, emu := serve(t, false, "generic-wind-speed")
	dir := t.TempDir()
	site := filepath.Join(dir, "site.yaml")
	src := fmt.Sprintf("site: {id: \"H1\"}\ngateway: {id: gw-hup}\nmetrics: {listen: \"off\"}\nprofiles_dir: profiles\nbuses:\n  - name: f\n    url: tcp://%s\n    devices:\n      - {name: wind-1, profile: generic-wind-speed, slave: 1, interval: 100ms}\n", emu)
	if err := os.WriteFile(site, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	slow := filepath.Join(dir, "profiles", "slow.yaml")
	if err := syscall.Mkfifo(slow, 0o644); err != nil {
		t.Fatal(err)
	}
	const prof = "model: slow\nmanufacturer: test\ndata_type: Wind\nregisters:\n  - {name: W, area: holding}\n"
	// feed returns once the daemon has opened the FIFO, read prof and
	// seen its end; opened runs in between.
	feed := func(opened func()) {
		f, err := os.OpenFile(slow, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		opened()
		if _, err := f.WriteString(prof); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var stderr testtool.SyncBuffer
	cmd := exec.Command(bin, "run", "-c", site)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", stderr.String())
		}
	})
	feed(func() {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	})
	testtool.WaitFor(t, 20*time.Second, "the daemon running", func() bool { return strings.Contains(stderr.String(), "gateway running") })
	feed(func() {}) // the reload it was asked for reads the profiles again
	testtool.WaitFor(t, 20*time.Second, "the reload", func() bool { return strings.Contains(stderr.String(), "site file unchanged in effect") })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
}
