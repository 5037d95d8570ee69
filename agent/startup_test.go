package agent

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
)

// The daemon starts with a serial bus whose adapter is not plugged in (its
// port does not exist yet) next to a TCP bus: the TCP bus polls and its
// packets are delivered all along; the serial bus starts down, says why,
// and polls, without a restart, once its port appears.
func TestBusWhosePortAppearsLaterPollsWithoutARestart(t *testing.T) {
	up := newIngest(t, http.StatusNoContent)
	dir := t.TempDir()
	port := filepath.Join(dir, "ttyUSB0") // a symlink, made once the pty exists
	_, tcpAddr := emutest.Serve(t, false, "generic-mine-methane")
	src := fmt.Sprintf(`site: {id: "M1", id_field: MineId}
gateway: {id: gw-startup}
buffer: {path: buf.db}
metrics: {listen: "off"}
buses:
  - name: mine-tcp
    url: tcp://%s
    devices:
      - {name: ch4-tcp, profile: generic-mine-methane, slave: 1, interval: 100ms}
  - name: field-a
    url: rtu://%s?baud=9600
    devices:
      - {name: ch4-rtu, profile: generic-mine-methane, slave: 1, interval: 100ms}
uplink:
  upstreams:
    - url: %s/site
`, tcpAddr, port, up.URL)
	c := loadSiteFile(t, dir, src)
	var log testtool.SyncBuffer
	var tcpPolled, rtuPolled atomic.Int64
	g, err := Start(c, Options{
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		OnPolled: func(p *packet.Packet) {
			switch p.DeviceID {
			case "ch4-tcp":
				tcpPolled.Add(1)
			case "ch4-rtu":
				rtuPolled.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatalf("start with the serial port missing: %v", err)
	}
	defer g.Stop()

	testtool.WaitFor(t, 20*time.Second, "the TCP bus's packets delivered while the serial port is missing", func() bool {
		return up.packets.Load() >= 5 && tcpPolled.Load() >= 5
	})
	testtool.WaitFor(t, 20*time.Second, "the serial bus down for its missing port", func() bool {
		return linkKind(g, "ch4-rtu") == sensors.PortMissing
	})
	if n := rtuPolled.Load(); n != 0 {
		t.Fatalf("%d packets from a bus whose port does not exist", n)
	}
	if !strings.Contains(log.String(), port+" missing: is the adapter plugged in?") {
		t.Errorf("no log line says the port is missing:\n%s", log.String())
	}

	// The adapter is plugged in: the port appears, a device answers on it.
	emu, err := emulator.New(emutest.Devices(t, "generic-mine-methane"), emulator.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := emutest.ServePty(t, emu, 9600, 'N')
	if err := os.Symlink(b, port); err != nil {
		t.Fatal(err)
	}
	testtool.WaitFor(t, 60*time.Second, "the serial bus polling once its port appeared", func() bool {
		return rtuPolled.Load() >= 3
	})
	if k := linkKind(g, "ch4-rtu"); k != sensors.PortOK {
		t.Errorf("the serial bus polls but its port still shows %v", k)
	}
	if !strings.Contains(log.String(), "port open") {
		t.Errorf("no log line says the port opened:\n%s", log.String())
	}
	tcpAt, upAt := tcpPolled.Load(), up.packets.Load()
	testtool.WaitFor(t, 20*time.Second, "the TCP bus still polling and delivering", func() bool {
		return tcpPolled.Load() > tcpAt+3 && up.packets.Load() > upAt+3
	})
}

// linkKind is the kind of the port problem that device's bus reports now.
func linkKind(g *Agent, device string) sensors.PortKind {
	for _, d := range g.Sensors().Status() {
		if d.Name == device {
			return d.Port.Kind()
		}
	}
	return sensors.PortOK
}

// Run as root in a minimal image with no user database (no /etc/passwd,
// as the static field build reads it), the service's user cannot be
// looked up: there is none, the service runs as root, and its files stay
// root's, as when the user does not exist.
func TestServiceOwnerWithoutAUserDatabase(t *testing.T) {
	noPasswd := func(string) (*user.User, error) {
		return nil, &fs.PathError{Op: "open", Path: "/etc/passwd", Err: syscall.ENOENT}
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 0, 0); err != nil {
		testtool.Unsupported(t, "a directory of root's needs root: "+err.Error())
	}
	uid, gid, ok, err := serviceOwner(filepath.Join(dir, "a", "buffer.db"), noPasswd)
	if err != nil || ok || uid != 0 || gid != 0 {
		t.Errorf("no /etc/passwd: %d:%d %v %v, want 0:0 false <nil>", uid, gid, ok, err)
	}
	// Another failure to read the database is not its absence.
	broken := func(string) (*user.User, error) {
		return nil, &fs.PathError{Op: "open", Path: "/etc/passwd", Err: syscall.EIO}
	}
	if _, _, _, err := serviceOwner(filepath.Join(dir, "a", "buffer.db"), broken); err == nil {
		t.Error("an unreadable /etc/passwd passed for none")
	}
}

// The metrics listener's port taken by another program: the gateway runs
// and polls without its status page, the log says why, and once the
// program lets the port go the page is served, without a restart.
func TestServeWithTheMetricsPortTaken(t *testing.T) {
	// A port below the ephemeral range: once let go, no listener on
	// 127.0.0.1:0 nor an outgoing connection can take it meanwhile.
	var taken net.Listener
	port := testtool.OnFreshPort(t, func(port int) (err error) {
		taken, err = net.Listen("tcp", testtool.LoopbackAddr(port))
		return err
	})
	defer taken.Close()
	site := mineSite("gw-metrics", emulate(t, "generic-mine-methane"), "")
	site.Metrics = testtool.LoopbackAddr(port)
	c := loadSiteFile(t, t.TempDir(), site.String())
	var logs, out testtool.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, c, ServeOptions{File: c.File, Profiles: profiles, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Stdout: &out})
	}()
	testtool.WaitFor(t, 10*time.Second, "packets with the metrics port taken", func() bool {
		return strings.Count(out.String(), `"DataHead"`) > 2
	})
	if !strings.Contains(logs.String(), "metrics, health and status page not available") || !strings.Contains(logs.String(), "address already in use") {
		t.Errorf("the log does not say why there is no status page:\n%s", logs.String())
	}
	taken.Close()
	testtool.WaitFor(t, 10*time.Second, "the status page once the port is free", func() bool {
		code, _, err := testtool.Get("http://" + testtool.LoopbackAddr(port) + "/healthz")
		return err == nil && code == http.StatusOK
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second): // a hang detector
		t.Fatal("Serve did not return within 30s of its context's end")
	}
}

// An upstream whose name does not resolve at start (no DNS yet at boot):
// the gateway starts, polls and buffers, and keeps trying the upstream.
func TestStartWithAnUpstreamThatDoesNotResolve(t *testing.T) {
	c := site(t, emulate(t, "generic-mine-methane"), `uplink:
  upstreams:
    - url: http://no-such-host.invalid/site
`)
	var stored atomic.Int64
	g, err := Start(c, Options{OnPacket: func(*packet.Packet) { stored.Add(1) }})
	if err != nil {
		t.Fatalf("start with an upstream that does not resolve: %v", err)
	}
	testtool.WaitFor(t, 10*time.Second, "packets buffered", func() bool { return stored.Load() > 3 })
	if err := stopWithin(t, g, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}
