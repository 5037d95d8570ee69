package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/config"
	"fieldlink/downlink"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
)

// These tests run commands end to end: real mosquitto brokers, the
// emulator as the devices (with its write faults), a real buffer file.

// frameLog records the write requests the emulated devices received.
type frameLog struct {
	mu     sync.Mutex
	frames map[byte][]string // by slave: hex PDUs of fc 5, 6, 15, 16
}

func (f *frameLog) on(slave byte, pdu []byte) {
	if len(pdu) == 0 || !slices.Contains([]byte{5, 6, 15, 16}, pdu[0]) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frames[slave] = append(f.frames[slave], hex.EncodeToString(pdu))
}

func (f *frameLog) of(slave byte) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.frames[slave])
}

// platform is the platform's side of one broker: it publishes commands
// and collects results and Command packets.
type platform struct {
	c       *brokertest.Client
	mu      sync.Mutex
	results []downlink.Result
	records []string
}

func newPlatform(t *testing.T, addr string) *platform {
	t.Helper()
	p := &platform{c: brokertest.NewClient(t, brokertest.Options{Name: "platform", Brokers: []string{addr}, Wait: 10 * time.Second})}
	sub := func(topic string, f func([]byte)) {
		p.c.Subscribe(t, topic, func(_ string, payload []byte) { f(payload) })
	}
	sub("fieldlink/001/gw-dl/cmd/result", func(b []byte) {
		var r downlink.Result
		if err := json.Unmarshal(b, &r); err != nil {
			t.Errorf("result %s: %v", b, err)
			return
		}
		p.mu.Lock()
		p.results = append(p.results, r)
		p.mu.Unlock()
	})
	sub("fieldlink/001/gw-dl/Command", func(b []byte) {
		p.mu.Lock()
		p.records = append(p.records, string(b))
		p.mu.Unlock()
	})
	return p
}

func (p *platform) send(t *testing.T, cmd string, retained bool) {
	t.Helper()
	p.c.Publish(t, "fieldlink/001/gw-dl/cmd", []byte(cmd), retained)
}

// result waits for the result of id.
func (p *platform) result(t *testing.T, id string) downlink.Result {
	t.Helper()
	var out downlink.Result
	testtool.WaitFor(t, 15*time.Second, "the result of "+id, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, r := range p.results {
			if r.ID == id {
				out = r
				return true
			}
		}
		return false
	})
	return out
}

func (p *platform) count(id string) (results, records int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.results {
		if r.ID == id {
			results++
		}
	}
	for _, r := range p.records {
		if strings.Contains(r, `"CommandId":"`+id+`"`) {
			records++
		}
	}
	return results, records
}

// Slaves of the downlink site: four valve controllers (plain, clamping,
// dropping write replies, refusing writes) and a weather sensor for the
// interlock.
const (
	slaveValve  = 1
	slaveClamp  = 2
	slaveDrop   = 3
	slaveRefuse = 4
)

type dlRig struct {
	g       *Agent
	frames  *frameLog
	brokers []*testtool.Mosquitto
	c       *config.Config
	log     *testtool.SyncBuffer
}

func startDownlinkSite(t *testing.T, extra string, brokers ...*testtool.Mosquitto) *dlRig {
	t.Helper()
	devs := emutest.Devices(t, "generic-irrigation-valve", "generic-irrigation-valve", "generic-irrigation-valve", "generic-irrigation-valve", "renke-rs-ws-n01")
	devs[1].Faults.ClampWrite = emulator.ClampRange(0, 300)
	devs[2].Faults.DropWriteReplies = true
	devs[3].Faults.RefuseWrites = true
	frames := &frameLog{frames: map[byte][]string{}}
	_, addr := emutest.ServeDevices(t, false, devs, emulator.Options{Seed: 1, OnRequest: frames.on})
	unsigned := ""
	if !strings.Contains(extra, "keys:") {
		unsigned = ", allow_unsigned: true" // said explicitly, or the site file is refused
	}
	var ups strings.Builder
	for _, b := range brokers {
		fmt.Fprintf(&ups, "    - {url: %q}\n", b.URL())
	}
	valve := func(name string, slave int) string {
		return fmt.Sprintf(`      - name: %s
        profile: generic-irrigation-valve
        slave: %d
        interval: 200ms
        writable:
          - {point: ValveOpen}
          - {point: Setpoint, min: 0, max: 50, step: 0.1,
             interlock: [{device: th-1, point: Temperature, above: -40, max_age: 5s}]}
          - {point: FlowTotal}
          - {point: PressureLimit, idempotent: true}
`, name, slave)
	}
	dir := t.TempDir()
	src := `site: {id: "001"}
gateway: {id: gw-dl}
buffer: {path: buf.db}
metrics: {listen: "off"}
buses:
  - name: field
    url: tcp://` + addr + `
    timeout: 300ms
    devices:
` + valve("valve-1", slaveValve) + valve("valve-clamp", slaveClamp) + valve("valve-drop", slaveDrop) + valve("valve-refuse", slaveRefuse) +
		`      - {name: th-1, profile: renke-rs-ws-n01, slave: 5, interval: 200ms}
uplink:
  probe: {interval: 200ms, timeout: 100ms}
  upstreams:
` + ups.String() + `downlink: {enabled: true` + extra + unsigned + `}
`
	c, g, log := startSiteFile(t, dir, src)
	// The gateway subscribes to the command topic before it publishes its
	// retained "online": wait for that on every broker.
	for _, b := range brokers {
		testtool.WaitFor(t, 15*time.Second, "the gateway online on "+b.Addr(), func() bool {
			return retained(t, b.Addr(), "fieldlink/001/gw-dl/status") == "online"
		})
	}
	// And for the interlock's reading.
	testtool.WaitFor(t, 10*time.Second, "a reading of th-1", func() bool {
		p, ok := g.Sensors().Latest("th-1", "Temperature", time.Now())
		return ok && !p.At.IsZero()
	})
	return &dlRig{g: g, frames: frames, brokers: brokers, c: c, log: log}
}

// retained returns topic's retained payload on the broker at addr.
func retained(t *testing.T, addr, topic string) string { return retainedWith(addr, topic, "", "") }

// retainedWith is retained as user (none when empty).
func retainedWith(addr, topic, user, pw string) string {
	return brokertest.Retained(brokertest.Options{Brokers: []string{addr}, Username: user, Password: pw}, topic)
}

func command(id, device, point, value string, issued time.Time, extra string) string {
	return fmt.Sprintf(`{"id":%q,"device":%q,"point":%q,"value":%s,"issued_at":%q,"actor":"ops:test"%s}`,
		id, device, point, value, issued.UTC().Format(time.RFC3339Nano), extra)
}

// Commands from the platform through two brokers: each runs once, byte
// for byte as the profile says, settled by read-back, and every outcome is
// published on both brokers and sent upstream as a Command packet.
func TestCommandsEndToEnd(t *testing.T) {
	b1 := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	b2 := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	r := startDownlinkSite(t, "", b1, b2)
	p1, p2 := newPlatform(t, b1.Addr()), newPlatform(t, b2.Addr())

	// The same command through both brokers: one frame.
	open := command("open-1", "valve-1", "ValveOpen", "true", time.Now(), "")
	p1.send(t, open, false)
	p2.send(t, open, false)
	if res := p1.result(t, "open-1"); res.Status != downlink.StatusDone || res.Readback.String() != "true" {
		t.Fatalf("open-1: %+v", res)
	}
	p2.result(t, "open-1")
	testtool.WaitFor(t, 15*time.Second, "both deliveries of open-1 answered", func() bool {
		n1, _ := p1.count("open-1")
		return n1 >= 2 // the result, then the first result again for the duplicate
	})

	// Byte for byte on the wire, each by its own function.
	for _, tc := range []struct{ id, point, value, frame string }{
		{"close-1", "ValveOpen", "false", "050000" + "0000"},
		{"sp-1", "Setpoint", "5.1", "060001" + "0033"},
		{"total-1", "FlowTotal", "-123456", "1000020002" + "04" + "1dc0fffe"},
		{"plim-1", "PressureLimit", "42.5", "1000040002" + "04" + "422a0000"},
	} {
		p1.send(t, command(tc.id, "valve-1", tc.point, tc.value, time.Now(), ""), false)
		if res := p1.result(t, tc.id); res.Status != downlink.StatusDone {
			t.Fatalf("%s: %+v", tc.id, res)
		}
		got := r.frames.of(slaveValve)
		if got[len(got)-1] != tc.frame {
			t.Errorf("%s: the device received %s, want %s", tc.id, got[len(got)-1], tc.frame)
		}
	}
	if got := r.frames.of(slaveValve); len(got) != 5 {
		t.Errorf("valve-1 received %d writes, want 5 (open-1 once, then four more): %v", len(got), got)
	}

	// The same id again, later: the first result, no frame.
	p1.send(t, open, false)
	testtool.WaitFor(t, 15*time.Second, "the duplicate answered", func() bool { n, _ := p1.count("open-1"); return n >= 3 })
	if got := r.frames.of(slaveValve); len(got) != 5 {
		t.Errorf("a duplicate id wrote: %v", got)
	}

	// Refusals: expired, too old, outside the limits, not writable: no frame.
	for _, tc := range []struct {
		cmd    string
		status downlink.Status
	}{
		{command("exp-1", "valve-1", "ValveOpen", "true", time.Now().Add(-10*time.Second), fmt.Sprintf(`,"expires_at":%q`, time.Now().Add(-time.Second).UTC().Format(time.RFC3339))), downlink.StatusExpired},
		{command("old-1", "valve-1", "ValveOpen", "true", time.Now().Add(-2*time.Minute), ""), downlink.StatusExpired},
		{command("max-1", "valve-1", "Setpoint", "51", time.Now(), ""), downlink.StatusRejected},
		{command("step-1", "valve-1", "Setpoint", "5.15", time.Now(), ""), downlink.StatusRejected},
		{command("ro-1", "valve-1", "Flow", "3", time.Now(), ""), downlink.StatusRejected},
	} {
		var c struct{ ID string }
		_ = json.Unmarshal([]byte(tc.cmd), &c)
		p1.send(t, tc.cmd, false)
		if res := p1.result(t, c.ID); res.Status != tc.status {
			t.Errorf("%s: %+v, want %s", c.ID, res, tc.status)
		}
	}
	if got := r.frames.of(slaveValve); len(got) != 5 {
		t.Errorf("refused commands wrote: %v", got)
	}

	// What the devices do to a write: clamp it, drop the reply, refuse it.
	for _, tc := range []struct {
		id, device, point, value string
		status                   downlink.Status
		readback, reason         string
	}{
		{"clamp-1", "valve-clamp", "Setpoint", "42.5", downlink.StatusFailed, "30", "clamped or ignored"},
		{"drop-1", "valve-drop", "ValveOpen", "true", downlink.StatusDone, "true", "settled by reading the point back"},
		{"drop-2", "valve-drop", "FlowTotal", "7", downlink.StatusDone, "7", "settled by reading the point back"},
		{"refuse-1", "valve-refuse", "ValveOpen", "true", downlink.StatusFailed, "false", "refused"},
	} {
		p1.send(t, command(tc.id, tc.device, tc.point, tc.value, time.Now(), ""), false)
		res := p1.result(t, tc.id)
		if res.Status != tc.status || !strings.HasPrefix(res.Readback.String(), tc.readback) || !strings.Contains(res.Reason, tc.reason) {
			t.Errorf("%s: %+v, want %s, read back %s, a reason saying %q", tc.id, res, tc.status, tc.readback, tc.reason)
		}
	}
	if got := r.frames.of(slaveRefuse); len(got) != 1 {
		t.Errorf("valve-refuse received %v: a non-idempotent point must not be retried", got)
	}

	// Every command's record reaches the platform through the buffer.
	for _, id := range []string{"open-1", "close-1", "sp-1", "exp-1", "clamp-1", "drop-1", "refuse-1"} {
		testtool.WaitFor(t, 15*time.Second, "the Command packet of "+id, func() bool {
			_, n1 := p1.count(id)
			_, n2 := p2.count(id)
			return n1+n2 >= 1
		})
	}
	// The status page's view: newest first, with device and point.
	dl := r.g.Sources().Downlink()
	if !dl.Enabled || len(dl.Commands) == 0 || dl.Commands[0].Device != "valve-refuse" || dl.Commands[0].OK || !strings.Contains(dl.Commands[0].Command, "ValveOpen = true (refuse-1)") {
		t.Errorf("status page downlink: %+v", dl)
	}
	// Without keys, the page and the log say commands run unsigned.
	if !dl.Unsigned {
		t.Errorf("status page downlink: Unsigned is false; the site has no keys")
	}
	if !strings.Contains(r.log.String(), "unsigned commands") {
		t.Errorf("the log does not warn that commands run unsigned:\n%s", r.log)
	}
	counts := r.g.Commands().Counts()
	if counts[downlink.StatusDone] < 7 || counts[downlink.StatusExpired] != 2 || counts[downlink.StatusFailed] != 2 {
		t.Errorf("counts %v", counts)
	}
}

// Nothing is queued through an outage or a restart: a command the broker
// kept (retained) while the gateway was away never runs.
func TestCommandKeptByTheBrokerNeverRuns(t *testing.T) {
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	p := newPlatform(t, b.Addr())
	p.send(t, command("late-1", "valve-1", "ValveOpen", "true", time.Now(), ""), true)
	r := startDownlinkSite(t, "", b)
	p.send(t, command("live-1", "valve-1", "Setpoint", "10", time.Now(), ""), false)
	if res := p.result(t, "live-1"); res.Status != downlink.StatusDone {
		t.Fatalf("live-1: %+v", res)
	}
	if got := r.frames.of(slaveValve); len(got) != 1 || !strings.HasPrefix(got[0], "06") {
		t.Errorf("the device received %v, want only live-1's write", got)
	}
	if !strings.Contains(r.log.String(), "retained message dropped") {
		t.Error("the log does not say the retained command was dropped")
	}
}

// With keys, only signed commands run: unsigned, wrongly signed and altered
// ones are rejected before their id is kept; a replay gets the first
// result; the private key never reaches the log.
func TestSignedCommands(t *testing.T) {
	dir := t.TempDir()
	priv := testtool.SigningKeyFiles(t, filepath.Join(dir, "ops"))
	_, other, _ := ed25519.GenerateKey(nil)
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	p := newPlatform(t, b.Addr())
	r := startDownlinkSite(t, fmt.Sprintf(", keys: [%q]", filepath.Join(dir, "ops.pub")), b)
	if r.g.Sources().Downlink().Unsigned || strings.Contains(r.log.String(), "unsigned commands") {
		t.Error("a site with keys is shown or logged as running unsigned commands")
	}

	cmd, err := downlink.ParseCommand([]byte(command("s-1", "valve-1", "ValveOpen", "true", time.Now(), "")))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Site, cmd.Gateway = "001", "gw-dl"
	signed := string(downlink.Sign(cmd, priv).JSON())
	p.send(t, string(cmd.JSON()), false)
	if res := p.result(t, "s-1"); res.Status != downlink.StatusRejected {
		t.Fatalf("unsigned: %+v", res)
	}
	p.send(t, string(downlink.Sign(cmd, other).JSON()), false)
	p.send(t, strings.Replace(signed, `"value":true`, `"value":false`, 1), false)
	// Signed by the right key for another gateway, copied onto this one's
	// topic.
	elsewhere := cmd
	elsewhere.Gateway = "gw-other"
	p.send(t, string(downlink.Sign(elsewhere, priv).JSON()), false)
	testtool.WaitFor(t, 15*time.Second, "four rejections", func() bool { n, _ := p.count("s-1"); return n >= 4 })
	p.mu.Lock()
	copied := slices.ContainsFunc(p.results, func(r downlink.Result) bool {
		return r.Status == downlink.StatusRejected && strings.Contains(r.Reason, "signed for gateway gw-other at site 001; this is gateway gw-dl")
	})
	p.mu.Unlock()
	if !copied {
		t.Error("the command signed for another gateway was not rejected as such")
	}
	if got := r.frames.of(slaveValve); len(got) != 0 {
		t.Fatalf("rejected commands wrote %v", got)
	}
	p.send(t, signed, false)
	testtool.WaitFor(t, 15*time.Second, "the signed command done", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return slices.ContainsFunc(p.results, func(r downlink.Result) bool { return r.ID == "s-1" && r.Status == downlink.StatusDone })
	})
	p.send(t, signed, false) // a replay
	testtool.WaitFor(t, 15*time.Second, "the replay answered", func() bool { n, _ := p.count("s-1"); return n >= 6 })
	if got := r.frames.of(slaveValve); len(got) != 1 {
		t.Errorf("the device received %v, want the signed command once", got)
	}
	key, _ := os.ReadFile(filepath.Join(dir, "ops.key"))
	seed := strings.Fields(string(key))
	if strings.Contains(r.log.String(), seed[len(seed)-1]) {
		t.Error("the private key is in the log")
	}
}

// gateway write's path: a command through the running daemon's control
// socket takes its turn on the bus and is audited like any other.
func TestControlSocket(t *testing.T) {
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	r := startDownlinkSite(t, "", b)
	path := ControlPath(r.c)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v, mode %v; want 0600", path, err, fi.Mode().Perm())
	}
	cmd := downlink.Command{ID: "local-1", Device: "valve-1", Point: "Setpoint", Value: downlink.Number(12.5),
		IssuedAt: downlink.NewTimestamp(time.Now()), Actor: "local:test"}
	res, err := SendCommand(context.Background(), path, cmd)
	if err != nil || res.Status != downlink.StatusDone || res.Readback.String() != "12.5" {
		t.Fatalf("%+v %v", res, err)
	}
	if got := r.frames.of(slaveValve); len(got) != 1 || got[0] != "060001007d" {
		t.Errorf("the device received %v, want 060001007d", got)
	}
	if _, err := SendCommand(context.Background(), filepath.Join(t.TempDir(), "none.sock"), cmd); err == nil || !strings.Contains(err.Error(), ErrNoDaemon.Error()) {
		t.Errorf("no daemon: %v", err)
	}
}

// A command that was running when the gateway died is never run again: at
// the next start the ledger records it unknown_outcome, and the same
// command, delivered again, gets that answer and writes nothing.
func TestCommandPendingAtRestartNeverRuns(t *testing.T) {
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	p := newPlatform(t, b.Addr())
	// The first life: the id is kept, then the process dies before the
	// write (the buffer file is simply closed, as a kill leaves it).
	first := startDownlinkSite(t, "", b)
	c := first.c
	cmdText := command("crash-1", "valve-1", "ValveOpen", "true", time.Now(), "")
	if err := first.g.Stop(); err != nil {
		t.Fatal(err)
	}
	q, err := OpenBuffer(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	store, err := downlink.OpenLedger(q, downlink.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := downlink.ParseCommand([]byte(cmdText))
	if err != nil {
		t.Fatal(err)
	}
	if prior, err := store.Begin(cmd, time.Now()); err != nil || prior != nil {
		t.Fatalf("Begin: %v %v", prior, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// The second life, on the same buffer file and devices.
	g, err := Start(c, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer stopWithin(t, g, 30*time.Second)
	testtool.WaitFor(t, 15*time.Second, "the gateway online", func() bool {
		return retained(t, b.Addr(), "fieldlink/001/gw-dl/status") == "online"
	})
	before := len(first.frames.of(slaveValve))
	p.send(t, cmdText, false)
	res := p.result(t, "crash-1")
	if res.Status != downlink.StatusUnknownOutcome || !strings.Contains(res.Reason, "restarted") {
		t.Errorf("crash-1 after the restart: %+v, want unknown_outcome because the gateway restarted", res)
	}
	if got := first.frames.of(slaveValve); len(got) != before {
		t.Errorf("the command pending at the restart wrote: %v", got[before:])
	}
}

// startSiteFile writes src as dir/site.yaml, starts a gateway on it with
// its log kept (and shown if the test fails), and stops it at the end.
func startSiteFile(t *testing.T, dir, src string) (*config.Config, *Agent, *testtool.SyncBuffer) {
	t.Helper()
	c := loadSiteFile(t, dir, src)
	log := &testtool.SyncBuffer{}
	g, err := Start(c, Options{Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stopWithin(t, g, 30*time.Second)
		if t.Failed() {
			t.Logf("gateway log:\n%s", log.String())
		}
	})
	return c, g, log
}
