package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// healthDaemon is gateway run on a site file in a process of its own (this
// test binary, through TestHealthHelperProcess), as one version of the
// gateway runs under systemd: the gate tells versions apart by their
// process's start time.
type healthDaemon struct {
	cmd  *exec.Cmd
	done chan error
}

// startHealthDaemon starts the daemon again on site, whose metrics listen
// on port, where the last one listened (the gate finds it there); while the
// port is still taken it waits for it.
func startHealthDaemon(t *testing.T, site string, port int) *healthDaemon {
	t.Helper()
	var d *healthDaemon
	testtool.OnSamePort(t, port, func(int) error {
		var err error
		d, err = tryHealthDaemon(t, site)
		return err
	})
	return d
}

// tryHealthDaemon starts the daemon and waits until its metrics listen; when
// it says their port was taken (testtool.ErrPortInUse) it is stopped.
func tryHealthDaemon(t *testing.T, site string) (*healthDaemon, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHealthHelperProcess$", "--", "run", "-c", site, "-log-level", "info")
	cmd.Env = append(os.Environ(), "FIELDLINK_HEALTH_HELPER=1")
	log := &testtool.SyncBuffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &healthDaemon{cmd: cmd, done: make(chan error, 1)}
	exited := make(chan struct{})
	go func() { d.done <- cmd.Wait(); close(exited) }()
	if _, err := testtool.MetricsListening(log.String, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return nil, err
	}
	t.Cleanup(func() { d.stop(t) })
	return d, nil
}

// stop ends the daemon as systemd does, with SIGTERM, and waits.
func (d *healthDaemon) stop(t *testing.T) {
	t.Helper()
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-d.done; err != nil {
		t.Errorf("gateway run: %v\n%s", err, d.cmd.Stderr)
	}
	d.cmd = nil
}

// TestHealthHelperProcess is not a test: run by startHealthDaemon, it is
// the gateway.
func TestHealthHelperProcess(t *testing.T) {
	if os.Getenv("FIELDLINK_HEALTH_HELPER") != "1" {
		t.Skip("the gateway process of TestHealthGate")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(realMain(args, io.Discard, os.Stderr))
}

// healthSiteFile writes a site file polling one emulated anemometer at
// devAddr and delivering to the broker at brokerAddr, with its metrics on
// metricsAddr and its buffer in dir.
func healthSiteFile(t *testing.T, dir, devAddr, brokerAddr, metricsAddr string) string {
	t.Helper()
	return healthSite(devAddr, brokerAddr, metricsAddr, filepath.Join(dir, "buffer.db")).Write(t, "")
}

// healthSite is the health tests' site: healthSiteFile's, its metrics
// section and buffer path as given.
func healthSite(devAddr, brokerAddr, metrics, buffer string) testtool.SiteFile {
	return testtool.SiteFile{
		Site: `{id: "H1", id_field: FarmId}`, Gateway: "gw-h", Metrics: metrics, Buffer: buffer,
		Bus: "tcp://" + devAddr, Timeout: "200ms",
		Devices: []string{"{name: wind-1, profile: generic-wind-speed, slave: 1, interval: 100ms}"},
		Uplink:  []string{"probe: {interval: 200ms, timeout: 100ms}", `upstreams: [{url: "mqtt://` + brokerAddr + `"}]`},
	}
}

// TestHealthGate runs the gate as an updater would: record a baseline from
// the running daemon, replace the daemon, judge the new one. A new daemon
// that polls and delivers passes; one that polls while the network was
// already down before the update passes without delivering; one whose
// network was up before and is lost fails; one that cannot poll fails; and
// the old daemon, never restarted, fails.
func TestHealthGate(t *testing.T) {
	mosq := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	_, devAddr := serve(t, false, "generic-wind-speed")
	dir := t.TempDir()
	var site, badSite string
	baseline := filepath.Join(dir, "buffer.db.update.json")

	// waitRecord records baselines until one says what.
	waitRecord := func(t *testing.T, what string) {
		t.Helper()
		var out string
		if !testtool.Eventually(30*time.Second, 200*time.Millisecond, func() bool {
			_, out, _ = gw(t, "health", "-c", site, "-record")
			return strings.Contains(out, what)
		}) {
			t.Fatalf("no baseline says %q; the latest: %s", what, out)
		}
	}
	top := t     // the daemons live as long as the whole test
	var port int // their metrics'

	// update records the baseline from the running daemon old, stops it
	// and starts the new version on newSite, then runs the gate.
	update := func(old *healthDaemon, newSite, wait string) (*healthDaemon, int, string) {
		t.Helper()
		code, out, errOut := gw(t, "health", "-c", site, "-record")
		if code != 0 {
			t.Fatalf("health -record: %d %s %s", code, out, errOut)
		}
		old.stop(t)
		d := startHealthDaemon(top, newSite, port)
		code, out, errOut = gw(t, "health", "-c", site, "-wait", wait)
		return d, code, out + errOut
	}

	var d *healthDaemon
	port = testtool.OnFreshPort(t, func(p int) error {
		metricsAddr := testtool.LoopbackAddr(p)
		site = healthSiteFile(t, dir, devAddr, mosq.Addr(), metricsAddr)
		badSite = healthSiteFile(t, dir, testtool.RefusedAddr(t), mosq.Addr(), metricsAddr) // its bus answers nothing
		var err error
		d, err = tryHealthDaemon(t, site)
		return err
	})
	waitRecord(t, "1 of 1 devices answering, upstream reachable")

	t.Run("network up before and after: delivered", func(t *testing.T) {
		var code int
		var out string
		d, code, out = update(d, site, "60s")
		if code != 0 || !strings.Contains(out, "healthy after") || strings.Contains(out, " 0 delivered") {
			t.Fatalf("health: %d\n%s", code, out)
		}
	})
	t.Run("network up before, lost during the update: rolled back", func(t *testing.T) {
		var code int
		var out string
		d, code, out = func() (*healthDaemon, int, string) {
			code, o, e := gw(t, "health", "-c", site, "-record")
			if code != 0 {
				t.Fatalf("health -record: %s %s", o, e)
			}
			d.stop(t)
			mosq.Kill()
			nd := startHealthDaemon(top, site, port)
			code, o, e = gw(t, "health", "-c", site, "-wait", "3s")
			return nd, code, o + e
		}()
		if code != 1 || !strings.Contains(out, "nothing delivered since the daemon started") || !strings.Contains(out, "was reachable before the update") {
			t.Fatalf("health: %d\n%s", code, out)
		}
	})
	t.Run("network down before and after: not a failure", func(t *testing.T) {
		waitRecord(t, "no upstream reachable")
		var code int
		var out string
		d, code, out = update(d, site, "60s")
		if code != 0 || !strings.Contains(out, "no upstream was reachable before the update: not required") {
			t.Fatalf("health: %d\n%s", code, out)
		}
	})
	t.Run("a version that cannot poll: rolled back", func(t *testing.T) {
		var code int
		var out string
		d, code, out = update(d, badSite, "3s")
		if code != 1 || !strings.Contains(out, "0 of 1 devices answered since the daemon started, 1 needed (1 of 1 answered before the update)") {
			t.Fatalf("health: %d\n%s", code, out)
		}
	})
	t.Run("the old daemon still running: not the new version", func(t *testing.T) {
		d.stop(t)
		d = startHealthDaemon(top, site, port)
		waitRecord(t, "1 of 1 devices answering")
		if code, out, errOut := gw(t, "health", "-c", site, "-record"); code != 0 {
			t.Fatalf("health -record: %s %s", out, errOut)
		}
		code, out, errOut := gw(t, "health", "-c", site, "-wait", "2s")
		if code != 1 || !strings.Contains(out+errOut, "before the update began") {
			t.Fatalf("health: %d\n%s%s", code, out, errOut)
		}
	})
	t.Run("forget", func(t *testing.T) {
		if code, out, errOut := gw(t, "health", "-c", site, "-forget"); code != 0 {
			t.Fatalf("health -forget: %s %s", out, errOut)
		}
		if _, err := os.Stat(baseline); !os.IsNotExist(err) {
			t.Fatalf("baseline still there: %v", err)
		}
		// Without a baseline the running daemon is judged on its own.
		if code, out, errOut := gw(t, "health", "-c", site, "-wait", "30s"); code != 0 || !strings.Contains(out, "no baseline") {
			t.Fatalf("health without baseline: %d %s %s", code, out, errOut)
		}
	})
}

// With no daemon running, -record says so and the gate fails with the
// reason once -wait has passed.
func TestHealthWithoutDaemon(t *testing.T) {
	dir := t.TempDir()
	metricsAddr := testtool.RefusedAddr(t)
	site := healthSiteFile(t, dir, testtool.RefusedAddr(t), testtool.RefusedAddr(t), metricsAddr)
	code, out, errOut := gw(t, "health", "-c", site, "-record")
	if code != 0 || !strings.Contains(out, "no daemon answered") {
		t.Fatalf("health -record: %d %s %s", code, out, errOut)
	}
	code, out, errOut = gw(t, "health", "-c", site, "-wait", "1s")
	if code != 1 || !strings.Contains(out, "unhealthy after 1s") || !strings.Contains(out, metricsAddr+"/metrics") {
		t.Fatalf("health: %d %s %s", code, out, errOut)
	}
}

func TestHealthSiteFile(t *testing.T) {
	off := writeSite(t, "metrics: {listen: \"off\"}\n")
	if code, _, errOut := gw(t, "health", "-c", off, "-record"); code != 1 || !strings.Contains(errOut, "metrics.listen is off") {
		t.Errorf("metrics off: %d %s", code, errOut)
	}
	// A site file this version would refuse (an unknown key, a password
	// variable the updater's environment lacks) is still read for the
	// two keys the gate needs.
	dir := t.TempDir()
	lenient := writeSite(t, fmt.Sprintf("future_key: 1\nmetrics: {listen: %q}\nbuffer: {path: %s/b.db}\nuplink: {upstreams: [{url: \"mqtt://x\", password_env: NOT_SET_HERE}]}\n", testtool.RefusedAddr(t), dir))
	if code, out, errOut := gw(t, "health", "-c", lenient, "-record"); code != 0 || !strings.Contains(out, dir+"/b.db.update.json") {
		t.Errorf("lenient read: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := gw(t, "health", "-c", filepath.Join(dir, "missing.yaml")); code != 1 || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("missing site file: %d %s", code, errOut)
	}
}

// -readable-by refuses an update whose buffer formats the installed version
// does not read, and names them; it accepts this version's own formats.
func TestHealthFormats(t *testing.T) {
	code, out, errOut := gw(t, "health", "-formats")
	if code != 0 {
		t.Fatalf("health -formats: %d %s", code, errOut)
	}
	dir := t.TempDir()
	same := filepath.Join(dir, "same.json")
	if err := os.WriteFile(same, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := gw(t, "health", "-readable-by", same); code != 0 || !strings.Contains(out, "a rollback keeps the packets") {
		t.Errorf("own formats: %d %s %s", code, out, errOut)
	}

	// An older version that reads neither record format 1 nor the aux
	// bucket.
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	v["version"] = "0.9.0"
	reads := v["buffer"].(map[string]any)["reads"].(map[string]any)
	reads["record"] = []int{0}
	reads["buckets"] = []string{"meta", "seq", "alarm", "normal", "dead"}
	older, _ := json.Marshal(v)
	old := filepath.Join(dir, "old.json")
	if err := os.WriteFile(old, older, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = gw(t, "health", "-readable-by", old)
	if code != 1 || !strings.Contains(errOut, "a rollback to fieldlink 0.9.0 would strand packets") ||
		!strings.Contains(errOut, `writes buffer bucket "aux", record format 1, which 0.9.0 does not read`) {
		t.Errorf("older reader: %d %s", code, errOut)
	}

	junk := filepath.Join(dir, "junk.json")
	if err := os.WriteFile(junk, []byte(`{"version":"1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := gw(t, "health", "-readable-by", junk); code != 1 || !strings.Contains(errOut, "not the output of gateway health -formats") {
		t.Errorf("junk: %d %s", code, errOut)
	}
}

// lanIP returns an address of this host that is not loopback, as a
// gateway's LAN address.
func lanIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	if testtool.InCI() {
		t.Fatal("no IPv4 address but loopback: the test needs one, as a gateway's LAN address")
	}
	t.Skip("no IPv4 address but loopback: the test needs one, as a gateway's LAN address")
	return ""
}

// With metrics.listen on a LAN address, allow_remote and scrape_token, the
// daemon asks every client that is not on loopback for its token, the gate
// too (it reaches the LAN address from that address): the gate reads the
// token file and sends it, and judges the daemon instead of its 401.
func TestHealthGateWithScrapeToken(t *testing.T) {
	ip := lanIP(t)
	_, devAddr := serve(t, false, "generic-wind-speed")
	dir := t.TempDir()
	var site string
	testtool.OnFreshPort(t, func(p int) error {
		metricsAddr := net.JoinHostPort(ip, strconv.Itoa(p))
		site = healthSite(devAddr, testtool.RefusedAddr(t), fmt.Sprintf("{listen: %q, allow_remote: true, scrape_token: true}", metricsAddr), "buffer.db").Write(t, dir)
		_, err := tryHealthDaemon(t, site)
		return err
	})
	var out, errOut string
	if !testtool.Eventually(30*time.Second, 200*time.Millisecond, func() bool {
		_, out, errOut = gw(t, "health", "-c", site, "-record")
		return strings.Contains(out, "1 of 1 devices answering")
	}) {
		t.Fatalf("no baseline says the device answers; the latest: %s%s", out, errOut)
	}
	if !strings.Contains(out, filepath.Join(dir, "buffer.db.update.json")) {
		t.Errorf("the baseline is not beside the buffer, relative to the site file: %s", out)
	}
	if code, out, errOut := gw(t, "health", "-c", site, "-forget"); code != 0 {
		t.Fatalf("health -forget: %s %s", out, errOut)
	}
	if code, out, errOut := gw(t, "health", "-c", site, "-wait", "30s"); code != 0 || !strings.Contains(out, "healthy after") {
		t.Fatalf("health: %d %s %s", code, out, errOut)
	}
}
