package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fieldlink/config"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
)

// gw runs the gateway's command line in-process.
func gw(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = realMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageAndVersion(t *testing.T) {
	if code, out, _ := gw(t, "help"); code != 0 || strings.Contains(out, "gateway demo") == fieldBuild || !strings.Contains(out, "gateway poll") {
		t.Fatalf("help (field build: %v): %d %s", fieldBuild, code, out)
	}
	if fieldBuild {
		if code, _, errOut := gw(t, "demo"); code != 1 || !strings.Contains(errOut, "not in this build") {
			t.Fatalf("demo in the field build: %d %s", code, errOut)
		}
	}
	if code, out, _ := gw(t, "version"); code != 0 || !strings.HasPrefix(out, "fieldlink gateway ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, errOut := gw(t, "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %d %s", code, errOut)
	}
}

func TestInitWritesStartersThatCheck(t *testing.T) {
	for _, kind := range []string{"farm", "mine"} {
		file := filepath.Join(t.TempDir(), kind+".yaml")
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file); code != 0 {
			t.Fatalf("init %s: %s", kind, errOut)
		}
		code, out, errOut := gw(t, "check", "-c", file)
		if code != 0 || !strings.Contains(out, "ok:") || errOut != "" {
			t.Fatalf("check %s must pass without a warning: %d\n%s\n%s", kind, code, out, errOut)
		}
		c, err := config.Load(file, loadProfiles)
		if err != nil || c.Uplink == nil || c.Buffer.Path != config.DefaultBufferPath || c.Metrics.Listen == "off" {
			t.Fatalf("the %s starter must run as it is (an uplink, the buffer, the status page): %v %+v", kind, err, c)
		}
		// Not overwritten without asking; no terminal to ask on is a no.
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file); code == 0 || !strings.Contains(errOut, "not overwritten") {
			t.Fatalf("init must not overwrite: %s", errOut)
		}
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file, "-force"); code != 0 {
			t.Fatalf("init -force: %s", errOut)
		}
	}
	if code, _, errOut := gw(t, "init", "--kind", "factory"); code == 0 || !strings.Contains(errOut, "valid: farm, mine") {
		t.Fatalf("init bad kind: %s", errOut)
	}
	// Written to site.yaml unless told otherwise; "-o -" prints it.
	t.Chdir(t.TempDir())
	if code, _, errOut := gw(t, "init"); code != 0 || !strings.Contains(errOut, "wrote site.yaml") {
		t.Fatalf("init: %d %s", code, errOut)
	}
	if code, out, _ := gw(t, "init", "-o", "-"); code != 0 || !strings.HasPrefix(out, "# fieldlink site file for a farm") {
		t.Fatalf("init -o -: %d %s", code, out)
	}
}

// A fresh starter, as init writes it for a port and a broker, runs as it
// is: every device of its line, served by the emulator on a serial pty,
// reaches a real mosquitto.
func TestInitStarterRunsAsItIs(t *testing.T) {
	broker := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	port, line := testtool.PtyPair(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "site.yaml")
	if code, _, errOut := gw(t, "init", "--kind", "farm", "-port", port, "-broker", broker.URL(), "-buffer", "buffer.db", "-listen", "off", "-o", file); code != 0 {
		t.Fatalf("init: %s", errOut)
	}
	if code, _, errOut := gw(t, "check", file); code != 0 || errOut != "" {
		t.Fatalf("check: %d %s", code, errOut)
	}
	c, err := config.Load(file, loadProfiles)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--serial", line, "--baud", "4800", "--log-level", "warn"}
	want := map[string]bool{}
	for _, d := range c.Buses[0].Devices {
		args = append(args, "--profile", fmt.Sprintf("%s@%d", d.Profile, d.Slave))
		want[d.Name] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	var emuLog testtool.SyncBuffer
	emuDone := make(chan error, 1)
	go func() { emuDone <- cmdEmulate(ctx, args, io.Discard, &emuLog) }()
	defer func() { cancel(); <-emuDone }()
	testtool.WaitFor(t, 5*time.Second, "the emulator to open its port", func() bool {
		return strings.Contains(emuLog.String(), "serving RTU")
	})
	var mu sync.Mutex
	got := map[string]bool{}
	e2eSubscribe(t, broker.Addr(), "init", func(topic string, payload []byte) {
		if !strings.HasSuffix(topic, "/status") {
			testtool.ValidPacket(t, payload)
		}
		if p, err := packet.Decode(payload); err == nil {
			mu.Lock()
			got[p.DeviceID] = true
			mu.Unlock()
		}
	}, func(s string) { t.Error(s) })
	e2eStartGateway(t, file, io.Discard, "warn")
	testtool.WaitFor(t, 30*time.Second, "a packet of every device at the broker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	})
}

func TestCheckListsEveryErrorWithLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "site.yaml")
	src := `site: {id: "001", id_field: FarmID}
gateway: {id: gw-01}
buses:
  - name: a
    url: rtu:///dev/ttyUSB0?baud=fast
    devices:
      - {name: w, profile: generic-wind-speed, slave: 0, intervl: 5s}
`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := gw(t, "check", "-c", file)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{
		file + ":1:29: site.id_field: must be FarmId or MineId",
		file + ":5:10: buses[0].url:",
		file + ":7:58: buses[0].devices[0].intervl: unknown field",
		file + ":7:55: buses[0].devices[0].slave: must be 1..247",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check output lacks %q:\n%s", want, errOut)
		}
	}
}

// serve starts the emulator with the named profiles as slaves 1, 2, ...
func serve(t *testing.T, rtu bool, names ...string) (*emulator.Emulator, string) {
	return emutest.Serve(t, rtu, names...)
}

// mineSite is the tests' mine: one methane sensor, slave 1, on the bus at
// busAddr, its packets stored in buffer and delivered to the upstream (an
// upstream's YAML as a flow list takes it).
func mineSite(buffer, busAddr, upstream string) testtool.SiteFile {
	return testtool.SiteFile{
		Site: `{id: "M1", id_field: MineId}`, Gateway: "gw-b", Buffer: buffer, Bus: "tcp://" + busAddr,
		Devices: []string{"{name: ch4-1, profile: generic-mine-methane, slave: 1}"},
		Uplink:  []string{"upstreams: [" + upstream + "]"},
	}
}

func writeSite(t *testing.T, src string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestPollPrintsOnePacketPerDevice(t *testing.T) {
	_, addr := serve(t, true, "generic-mine-methane", "generic-mine-oxygen", "renke-rs-ws-n01")
	file := writeSite(t, fmt.Sprintf(`site: {id: "M7", id_field: MineId, timezone: Asia/Shanghai}
gateway: {id: gw-9}
packet: {values: number}
buses:
  - name: face
    url: rtuovertcp://%s?baud=9600
    timeout: 200ms
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1}
      - {name: o2-1,  profile: generic-mine-oxygen,  slave: 2}
      - {name: th-1,  profile: renke-rs-ws-n01,      slave: 3}
`, addr))
	code, out, errOut := gw(t, "poll", "-c", file)
	if code != 0 {
		t.Fatalf("poll: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	seen := map[string]bool{}
	epochs := map[string]bool{}
	for _, l := range lines {
		testtool.ValidPacket(t, []byte(l))
		p, err := packet.Decode([]byte(l))
		if err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		seen[p.DeviceID] = true
		if p.SiteID != "M7" || p.IDField != "MineId" || p.GatewayID != "gw-9" || p.Seq == 0 {
			t.Fatalf("head: %s", l)
		}
		// Its own epoch, so that (GatewayId, Epoch, Seq) never names a
		// packet of the running gateway, which numbers from 1 too.
		if !strings.HasPrefix(p.Epoch, "poll-") {
			t.Fatalf("a poll packet without an epoch of its own: %s", l)
		}
		epochs[p.Epoch] = true
		if !strings.Contains(l, `"DataBody":{"`) || strings.Contains(l, `":"0.`) {
			t.Fatalf("number mode should print bare numbers: %s", l)
		}
	}
	if !seen["ch4-1"] || !seen["o2-1"] || !seen["th-1"] {
		t.Fatalf("devices %v", seen)
	}
	if len(epochs) != 1 {
		t.Errorf("one poll, %d epochs: %v", len(epochs), epochs)
	}
	_, again, _ := gw(t, "poll", "-c", file)
	if p, err := packet.Decode([]byte(strings.SplitN(again, "\n", 2)[0])); err != nil || epochs[p.Epoch] {
		t.Errorf("a second poll reuses the first one's epoch (%v): %s", err, again)
	}

	// A device that does not answer: the others still print, the exit code
	// says something failed, stderr names the device.
	file = writeSite(t, strings.Replace(mustRead(t, file), "slave: 3}", "slave: 9}", 1))
	code, out, errOut = gw(t, "poll", "-c", file)
	if code != 1 || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "device th-1 (slave 9 on bus face)") {
		t.Fatalf("dead device: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	// Said once, with what to check.
	if strings.Count(errOut, "th-1") != 1 || !strings.Contains(errOut, "hint: check the wiring") {
		t.Fatalf("the failure must be printed once, with a hint:\n%s", errOut)
	}
}

func mustRead(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pymodbus, a Modbus implementation nobody here wrote, answers gateway read.
func TestReadAgainstPymodbus(t *testing.T) {
	py := testtool.RequirePython(t, "pymodbus", "python3-pymodbus")
	port := testtool.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "../../sensors/modbus/testdata/pymodbus_server.py", "--tcp", fmt.Sprint(port))
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "READY") {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("pymodbus server exited before READY")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("pymodbus server not ready in 20s")
	}
	url := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	code, out, errOut := gw(t, "read", "-url", url, "-slave", "2", "-area", "input", "-address", "10", "-count", "3")
	if code != 0 || out != "[10]: 2510\n[11]: 2511\n[12]: 2512\n" {
		t.Fatalf("read: %d %q %s", code, out, errOut)
	}
	// Registers 3 and 4 of slave 1 hold 1003, 1004: as uint32 ABCD that is
	// 1003<<16 | 1004, as CDAB 1004<<16 | 1003.
	code, out, _ = gw(t, "read", "-url", url, "-slave", "1", "-address", "3", "-type", "uint32", "-order", "CDAB")
	if code != 0 || out != fmt.Sprintf("[3]: %d\n", 1004<<16|1003) {
		t.Fatalf("read uint32 CDAB: %q", out)
	}
	code, _, errOut = gw(t, "read", "-url", url, "-slave", "1", "-address", "500")
	if code != 1 || !strings.Contains(errOut, "illegal data address") {
		t.Fatalf("read past the map: %d %s", code, errOut)
	}
	code, out, _ = gw(t, "read", "-url", url, "-slave", "1", "-area", "coil", "-address", "0", "-count", "4")
	if code != 0 || out != "[0]: true\n[1]: false\n[2]: false\n[3]: true\n" {
		t.Fatalf("read coils: %q", out)
	}
}

// mbpoll, a reference Modbus master, reads the project's emulator.
func TestMbpollReadsTheEmulator(t *testing.T) {
	mbpoll := testtool.Require(t, "mbpoll", "mbpoll")
	p, err := profile.Parse("const", "const.yaml", []byte(`
model: const
data_type: Test
registers:
  - {name: A, area: holding, address: 0, emulate: {model: constant, min: 1234, max: 1234}}
  - {name: B, area: holding, address: 1, type: int16, emulate: {model: constant, min: -5, max: -5}}
`))
	if err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.New([]emulator.Device{{Slave: 7, Profile: p}}, emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(testtool.ServeLoopback(t, emu.ServeTCP))
	// mbpoll numbers registers from 1: -r 1 is address 0.
	out, err := exec.Command(mbpoll, "-m", "tcp", "-p", port, "-a", "7", "-r", "1", "-c", "2", "-t", "4", "-1", "127.0.0.1").CombinedOutput()
	if err != nil {
		t.Fatalf("mbpoll: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "[1]: \t1234") || !strings.Contains(string(out), "[2]: \t65531 (-5)") {
		t.Fatalf("mbpoll output:\n%s", out)
	}
}

func TestScanFindsSlaves(t *testing.T) {
	_, addr := serve(t, true, "generic-wind-speed", "generic-mine-methane", "generic-mine-oxygen")
	code, out, errOut := gw(t, "scan", "-url", "rtuovertcp://"+addr+"?baud=9600", "-slaves", "1-5", "-timeout", "50ms")
	if code != 0 {
		t.Fatalf("scan: %d %s", code, errOut)
	}
	for _, id := range []string{"found slave 1 ", "found slave 2 ", "found slave 3 "} {
		if !strings.Contains(out, id) {
			t.Fatalf("scan output lacks %q:\n%s", id, out)
		}
	}
	if strings.Contains(out, "found slave 4") || strings.Contains(out, "found slave 5") {
		t.Fatalf("phantom slaves:\n%s", out)
	}
	if !strings.Contains(errOut, "trying 5 slave ids at 1 line setting: at most about 250ms") || !strings.Contains(errOut, "Ctrl-C stops") {
		t.Fatalf("scan gives no estimate:\n%s", errOut)
	}

	// Stopped (Ctrl-C), it says where it was and what it found, not
	// "context canceled".
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o, e bytes.Buffer
	err := cmdScan(ctx, []string{"-url", "rtuovertcp://" + addr + "?baud=9600", "-slaves", "1-247"}, &o, &e)
	if !errors.Is(err, errSilent) || !strings.Contains(e.String(), "scan stopped at slave 1 of rtuovertcp://") || strings.Contains(e.String(), "context canceled") {
		t.Fatalf("stopped scan: %v\n%s", err, e.String())
	}
}

// On a serial line, scan finds the baud rate a device listens at.
func TestScanFindsBaudOnPty(t *testing.T) {
	a, b := testtool.PtyPair(t)
	set, _ := loadProfiles("")
	emu, err := emulator.New([]emulator.Device{{Slave: 4, Profile: set["generic-wind-speed"]}}, emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	port, err := emulator.OpenSerial(a, 19200, 'N', 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = emu.ServeRTU(ctx, port, 19200, 10) }()
	defer func() { cancel(); <-done; port.Close() }()
	code, out, errOut := gw(t, "scan", "-url", "rtu://"+b, "-slaves", "3-5", "-bauds", "19200", "-timeout", "100ms")
	if code != 0 || !strings.Contains(out, "found slave 4 ") || !strings.Contains(out, "19200 8N1") {
		t.Fatalf("scan: %d\n%s\n%s", code, out, errOut)
	}
}

func TestEmulateRefusesNonLoopback(t *testing.T) {
	code, _, errOut := gw(t, "emulate", "--profile", "generic-wind-speed", "--listen", "tcp://0.0.0.0:0")
	if code != 1 || !strings.Contains(errOut, "not a loopback address") {
		t.Fatalf("%d %s", code, errOut)
	}
}

func TestDemoPrintsFarmAndMinePackets(t *testing.T) {
	if fieldBuild {
		t.Skip("the field build (-tags field) has no demo; TestUsageAndVersion checks it says so")
	}
	code, out, errOut := gw(t, "demo", "-duration", "2500ms")
	if code != 0 {
		t.Fatalf("demo: %d %s", code, errOut)
	}
	var farm, mine int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		testtool.ValidPacket(t, []byte(l))
		p, err := packet.Decode([]byte(l))
		if err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		switch p.IDField {
		case "FarmId":
			farm++
		case "MineId":
			mine++
		}
	}
	if farm < 6 || mine < 5 {
		t.Fatalf("farm %d, mine %d packets\n%s", farm, mine, errOut)
	}
	if !strings.Contains(errOut, "HEALTH") || !strings.Contains(errOut, "ch4-1") {
		t.Fatalf("no summary:\n%s", errOut)
	}
}

// gateway emulate on one end of a pty pair answers gateway read on the other.
func TestEmulateServesASerialLine(t *testing.T) {
	a, b := testtool.PtyPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	var errb testtool.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- cmdEmulate(ctx, []string{"--profile", "generic-mine-methane@5", "--serial", a, "--baud", "19200", "--parity", "E", "--log-level", "warn"}, &bytes.Buffer{}, &errb)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("emulate: %v", err)
		}
	}()
	testtool.WaitFor(t, 5*time.Second, "the emulator to open its port", func() bool {
		return strings.Contains(errb.String(), "serving RTU")
	})
	code, out, errOut := gw(t, "read", "-url", "rtu://"+b+"?baud=19200&parity=E", "-slave", "5", "-address", "0")
	if code != 0 || !strings.HasPrefix(out, "[0]: ") {
		t.Fatalf("read: %d %q %s", code, out, errOut)
	}
	code, _, errOut = gw(t, "read", "-url", "rtu://"+b+"?baud=19200&parity=E", "-slave", "6", "-timeout", "100ms")
	if code != 1 || !strings.Contains(errOut, "slave 6") {
		t.Fatalf("absent slave: %d %s", code, errOut)
	}
}

// gateway buffer stats|export|purge on a buffer left by a run whose only
// upstream was down.
func TestBufferCommands(t *testing.T) {
	_, addr := serve(t, false, "generic-mine-methane")
	dir := t.TempDir()
	sf := mineSite(filepath.Join(dir, "buf.db"), addr, `{url: "http://127.0.0.1:1/ingest"}`)
	sf.Devices[0] = "{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}"
	sf.Uplink = append([]string{"probe: {interval: 100ms, timeout: 50ms}"}, sf.Uplink...)
	site := sf.Write(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var errb testtool.SyncBuffer
	go func() { done <- cmdRun(ctx, []string{"-c", site, "-log-level", "warn"}, io.Discard, &errb) }()
	// Once the daemon holds the buffer, stats refuses and says why.
	var code int
	var errOut string
	testtool.WaitFor(t, 20*time.Second, "buffer stats to refuse while the daemon runs", func() bool {
		code, _, errOut = gw(t, "buffer", "stats", "-c", site)
		return code != 0 && strings.Contains(errOut, "the gateway is running: it holds ") && strings.Contains(errOut, "/status.json") && !strings.Contains(errOut, "in use by another gateway process?")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	code, out, errOut := gw(t, "buffer", "stats", "-c", site)
	if code != 0 || !strings.Contains(out, "depth") || strings.Contains(out, "depth                0 ") {
		t.Fatalf("stats: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = gw(t, "buffer", "export", "-c", site)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 3 {
		t.Fatalf("export: %d %q", code, out)
	}
	var last uint64
	for _, l := range lines {
		testtool.ValidPacket(t, []byte(l))
		p, err := packet.Decode([]byte(l))
		if err != nil || p.Seq <= last || p.Epoch == "" {
			t.Fatalf("export line %q: %v (seq after %d)", l, err, last)
		}
		last = p.Seq
	}
	if code, _, errOut := gw(t, "buffer", "purge", "-c", site); code == 0 || !strings.Contains(errOut, "-yes") {
		t.Fatalf("purge without -yes: %d %s", code, errOut)
	}
	if code, _, errOut := gw(t, "buffer", "purge", "-c", site, "-yes"); code != 0 || !strings.Contains(errOut, fmt.Sprintf("purged %d packets", len(lines))) {
		t.Fatalf("purge: %d %s", code, errOut)
	}
	if _, out, _ := gw(t, "buffer", "export", "-c", site); out != "" {
		t.Fatalf("export after purge: %q", out)
	}
}

// gateway run serves Prometheus metrics, /healthz and /readyz.
func TestRunServesMetricsAndHealth(t *testing.T) {
	_, addr := serve(t, false, "generic-mine-methane")
	listen := testtool.FreeAddr(t)
	sf := mineSite(filepath.Join(t.TempDir(), "buf.db"), addr, `{url: "http://127.0.0.1:1/ingest"}`)
	sf.Gateway, sf.Metrics = "gw-m", listen
	sf.Devices[0] = "{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}"
	site := sf.Write(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmdRun(ctx, []string{"-c", site, "-log-level", "warn"}, io.Discard, io.Discard) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	get := func(path string) (int, string) {
		code, body, err := testtool.Get("http://" + listen + path)
		if err != nil {
			return 0, err.Error()
		}
		return code, body
	}
	testtool.WaitFor(t, 10*time.Second, "/readyz to say ready", func() bool { code, _ := get("/readyz"); return code == 200 })
	if code, body := get("/healthz"); code != 200 || body != "ok\n" && body != "ok" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	testtool.WaitFor(t, 10*time.Second, "metrics of the device, buffer and upstream", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `fieldlink_device_health{bus="field",device="ch4-1",state="ok"} 1`) &&
			strings.Contains(body, `fieldlink_buffer_records{kind="normal"}`) &&
			strings.Contains(body, `fieldlink_upstream_up{upstream=`) &&
			strings.Contains(body, `fieldlink_selector_info{selector="drf_cswlc"} 1`) &&
			strings.Contains(body, `fieldlink_selector_fallbacks_total{selector="drf_cswlc"} 0`)
	})
}

// gateway delphi turns expert estimates into a drf section the site file
// accepts, and says which check failed.
func TestDelphiWritesASiteSection(t *testing.T) {
	code, out, errOut := gw(t, "delphi", "-i", "testdata/experts.csv")
	if code != 0 || !strings.Contains(out, "selector: drf") || !strings.Contains(out, "in_flight: 61.3333") {
		t.Fatalf("delphi: %d\n%s\n%s", code, out, errOut)
	}
	_, addr := serve(t, false, "generic-mine-methane")
	site := writeSite(t, fmt.Sprintf(`site: {id: "M1", id_field: MineId}
gateway: {id: gw-d}
buses:
  - name: b
    url: tcp://%s
    devices: [{name: ch4-1, profile: generic-mine-methane, slave: 1}]
%s  upstreams: [{url: "http://127.0.0.1:1/ingest"}]
`, addr, out[strings.Index(out, "uplink:"):]))
	if code, _, errOut := gw(t, "check", "-c", site); code != 0 {
		t.Fatalf("the site file does not take delphi's output: %s", errOut)
	}
	code, _, errOut = gw(t, "delphi", "-i", "testdata/experts.csv", "-asked", "3")
	if code != 1 || !strings.Contains(errOut, "response rate 2/3") {
		t.Fatalf("delphi with 3 asked: %d %s", code, errOut)
	}
}

func TestLogFormats(t *testing.T) {
	var b bytes.Buffer
	l, err := newLoggerFormat(&b, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("device not answering", "device", "ch4-1")
	if !json.Valid(bytes.TrimSpace(b.Bytes())) || !strings.Contains(b.String(), `"device":"ch4-1"`) {
		t.Fatalf("json log: %s", b.String())
	}
	t.Setenv("INVOCATION_ID", "abc")
	b.Reset()
	l, _ = newLogger(&b, "info")
	l.Info("x")
	if !strings.HasPrefix(b.String(), "{") {
		t.Fatalf("under systemd the log should be JSON: %s", b.String())
	}
	if _, err := newLoggerFormat(&b, "info", "xml"); err == nil {
		t.Fatal("xml accepted")
	}
}

// Under systemd (Type=notify), gateway run says READY=1 once it polls,
// feeds the watchdog, and says STOPPING=1 on its way out.
func TestRunNotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	_, addr := serve(t, false, "generic-mine-methane")
	site := writeSite(t, fmt.Sprintf(`site: {id: "M1", id_field: MineId}
gateway: {id: gw-s}
metrics: {listen: "off"}
buses:
  - name: b
    url: tcp://%s
    devices: [{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}]
`, addr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmdRun(ctx, []string{"-c", site, "-log-level", "warn"}, io.Discard, io.Discard) }()
	got := map[string]int{}
	buf := make([]byte, 256)
	deadline := time.Now().Add(10 * time.Second)
	for got["READY=1"] == 0 || got["WATCHDOG=1"] < 2 {
		_ = conn.SetReadDeadline(deadline)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("notifications so far %v: %v", got, err)
		}
		got[string(buf[:n])]++
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for got["STOPPING=1"] == 0 {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no STOPPING=1 (got %v): %v", got, err)
		}
		got[string(buf[:n])]++
	}
}

// A near miss of a command's name is answered with the command meant.
func TestUnknownCommandSuggests(t *testing.T) {
	code, _, errOut := gw(t, "chek")
	if code != 2 || !strings.Contains(errOut, `unknown command "chek" (did you mean "check"?)`) {
		t.Fatalf("chek: %d %s", code, errOut)
	}
}

// A site file given without -c is understood, by every command that takes
// one, with flags before or after it.
func TestSiteFileWithoutDashC(t *testing.T) {
	file := filepath.Join(t.TempDir(), "farm.yaml")
	if code, _, errOut := gw(t, "init", "--kind", "farm", "-o", file); code != 0 {
		t.Fatalf("init: %s", errOut)
	}
	code, out, errOut := gw(t, "check", file)
	if code != 0 || !strings.Contains(out, "ok:") {
		t.Fatalf("check FILE: %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := gw(t, "check", "-c", file, "other.yaml"); code != 2 || !strings.Contains(errOut, `unexpected argument "other.yaml"`) {
		t.Fatalf("check -c FILE other.yaml must be refused: %d %s", code, errOut)
	}
}

// A binary built from a clone without -ldflags names its commit from the
// build's own record of it.
func TestVersionFromBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0d34e96b1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := versionLine("dev", "unknown", info), "fieldlink gateway dev (commit 0d34e96b1e2f, modified)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got, want := versionLine("1.4.0", "abc1234", info), "fieldlink gateway 1.4.0 (commit abc1234)"; got != want {
		t.Fatalf("a stamped commit wins: got %q, want %q", got, want)
	}
	if got, want := versionLine("dev", "unknown", nil), "fieldlink gateway dev (commit unknown)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Counts read as English: "1 register in 1 request", "1 bus"; a profile's
// maker is not said twice.
func TestCountsAndMakersReadWell(t *testing.T) {
	code, out, errOut := gw(t, "profiles")
	if code != 0 || strings.Contains(out, "generic generic") || !strings.Contains(out, "1 register ") {
		t.Fatalf("profiles: %d\n%s\n%s", code, out, errOut)
	}
}
