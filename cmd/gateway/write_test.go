package main

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"fieldlink/agent"
	"fieldlink/config"
	"fieldlink/downlink"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
)

func valveSite(t *testing.T) string {
	t.Helper()
	_, addr := emutest.Serve(t, false, "generic-irrigation-valve")
	dir := t.TempDir()
	site := testtool.SiteFile{
		Gateway: "gw-w", Buffer: "buf.db", Metrics: "off", Bus: "tcp://" + addr,
		Devices: []string{"{name: valve-1, profile: generic-irrigation-valve, slave: 1, writable: [{point: Setpoint, min: 0, max: 50}, {point: ValveOpen}]}"},
		Uplink:  []string{`upstreams: [{url: "mqtt://127.0.0.1:1"}]`},
	}.Write(t, dir)
	return site
}

// valveDaemon starts a daemon on a valveSite, stopped when the test ends,
// and returns the site file, its configuration and the daemon.
func valveDaemon(t *testing.T) (string, *config.Config, *agent.Agent) {
	t.Helper()
	site := valveSite(t)
	c, err := config.Load(site, loadProfiles)
	if err != nil {
		t.Fatal(err)
	}
	g, err := agent.Start(c, agent.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Stop() })
	return site, c, g
}

func result(t *testing.T, out string) downlink.Result {
	t.Helper()
	var r downlink.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	return r
}

// gateway write with no daemon running goes straight to the bus, with
// the checks, the read-back and the audit of any command.
func TestWriteWithoutADaemon(t *testing.T) {
	site := valveSite(t)
	code, out, errOut := gw(t, "write", "-c", site, "-device", "valve-1", "-point", "Setpoint", "-value", "12.5")
	if r := result(t, out); code != 0 || r.Status != downlink.StatusDone || r.Readback.String() != "12.5" || !strings.HasPrefix(r.ID, "local-") {
		t.Fatalf("write: %d %+v %s", code, r, errOut)
	}
	code, out, _ = gw(t, "write", "-c", site, "-device", "valve-1", "-point", "Setpoint", "-value", "60")
	if r := result(t, out); code != 1 || r.Status != downlink.StatusRejected || !strings.Contains(r.Reason, "above max 50") {
		t.Fatalf("write over max: %d %+v", code, r)
	}
	if code, _, _ := gw(t, "write", "-c", site, "-device", "valve-1", "-point", "Setpoint"); code != 2 {
		t.Errorf("write without -value: exit %d, want 2", code)
	}
	code, out, errOut = gw(t, "audit", "-c", site, "-json")
	if code != 0 || strings.Count(out, `"device":"valve-1"`) < 2 || !strings.Contains(out, `"actor":"local:`) {
		t.Fatalf("audit: %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := gw(t, "audit", "-c", site, "-verify"); code != 0 {
		t.Fatalf("audit -verify: %d %s", code, errOut)
	}
}

// gateway write without a daemon takes the name checks of the control
// socket's path: a device, point or actor the audit log could not read
// back is refused before anything is written or audited.
func TestWriteWithoutADaemonChecksNames(t *testing.T) {
	site := valveSite(t)
	if code, out, errOut := gw(t, "write", "-c", site, "-device", "valve-1", "-point", "Setpoint", "-value", "10"); code != 0 {
		t.Fatalf("write: %d %s %s", code, out, errOut)
	}
	_, before, _ := gw(t, "audit", "-c", site)
	long := strings.Repeat("v", 129)
	for _, args := range [][]string{
		{"-device", long, "-point", "Setpoint"},
		{"-device", "valve-1", "-point", "Set\x01point"},
		{"-device", "valve-1", "-point", "Setpoint", "-actor", long},
	} {
		args = append([]string{"write", "-c", site, "-value", "10"}, args...)
		code, out, errOut := gw(t, args...)
		if code != 1 || out != "" || !strings.Contains(errOut, "want") {
			t.Errorf("%q: %d %q %q; want exit 1 and why on stderr", args, code, out, errOut)
		}
	}
	code, out, errOut := gw(t, "audit", "-c", site)
	if code != 0 || strings.Contains(out, "unreadable") || out != before {
		t.Fatalf("audit: %d\n%s%s\nwant, as before the refused writes:\n%s", code, out, errOut, before)
	}
	if code, out, errOut := gw(t, "audit", "-c", site, "-verify"); code != 0 {
		t.Fatalf("audit -verify: %d %s %s", code, out, errOut)
	}
}

// With a daemon running, gateway write goes through its control socket:
// the daemon, which holds the bus and the buffer, runs it.
func TestWriteThroughTheDaemon(t *testing.T) {
	site, _, g := valveDaemon(t)
	code, out, errOut := gw(t, "write", "-c", site, "-device", "valve-1", "-point", "ValveOpen", "-value", "true")
	if r := result(t, out); code != 0 || r.Status != downlink.StatusDone || r.Readback.String() != "true" {
		t.Fatalf("write: %d %+v %s", code, r, errOut)
	}
	if n := g.Commands().Counts()[downlink.StatusDone]; n != 1 {
		t.Errorf("the daemon counted %d commands done, want 1: the write did not go through it", n)
	}
}

// Beside a running daemon, which holds the buffer file, audit, audit
// -verify and buffer stats ask it through its control socket instead of
// asking to stop data collection.
func TestAuditAndStatsBesideTheDaemon(t *testing.T) {
	site, c, _ := valveDaemon(t)
	if code, out, errOut := gw(t, "write", "-c", site, "-device", "valve-1", "-point", "Setpoint", "-value", "7"); code != 0 {
		t.Fatalf("write: %d %s %s", code, out, errOut)
	}
	code, out, errOut := gw(t, "audit", "-c", site, "-verify")
	if code != 0 || !strings.Contains(out, "every hash and link checks out") {
		t.Errorf("audit -verify beside the daemon: %d %q %q", code, out, errOut)
	}
	code, out, errOut = gw(t, "audit", "-c", site)
	if code != 0 || !strings.Contains(out, "valve-1") || !strings.Contains(out, "Setpoint") {
		t.Errorf("audit beside the daemon: %d %q %q", code, out, errOut)
	}
	code, out, errOut = gw(t, "buffer", "stats", "-c", site)
	if code != 0 || !strings.Contains(out, "depth") || !strings.Contains(out, c.Buffer.Path) || !strings.Contains(out, "running daemon") {
		t.Errorf("buffer stats beside the daemon: %d %q %q", code, out, errOut)
	}
	// What needs the file to itself still asks to stop the daemon.
	if code, _, errOut := gw(t, "buffer", "export", "-c", site); code != 1 || !strings.Contains(errOut, "the gateway is running") {
		t.Errorf("buffer export beside the daemon: %d %q", code, errOut)
	}
}
