//go:build powercut

package powercut

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/downlink"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
)

// valveSlave is the commands run's valve controller on the emulator: the
// site's three sensors are slaves 1, 2, 3.
const valveSlave = 4

// The commands run's site adds the valve, whose FlowTotal (holding 2, an
// int32 in CDAB order, written by function 16) the platform's commands
// preset, and the downlink, with a max_age long enough that a command
// redelivered after many cuts still reaches the ledger instead of being
// refused as too old.
const (
	valveDevice  = "      - {name: valve-1, profile: generic-irrigation-valve, slave: 4, interval: 150ms, writable: [{point: FlowTotal}]}\n"
	downlinkYAML = "downlink: {enabled: true, allow_unsigned: true, max_age: 1h}\n"
)

// cmdValue is command n's value: each command presets the totaliser to its
// own number, so that a write on the wire names its command.
func cmdValue(n int) int32 { return 100000 + int32(n) }

// cmdPayload is command n, pc-n, issued now: a preset of the valve's
// totaliser to cmdValue(n).
func cmdPayload(n int) string {
	return fmt.Sprintf(`{"id":"pc-%d","device":"valve-1","point":"FlowTotal","value":%d,"issued_at":%q,"actor":"ops:powercut"}`,
		n, cmdValue(n), time.Now().UTC().Format(time.RFC3339Nano))
}

// writeValue is the value a FlowTotal preset (fc 16 at address 2, two
// registers, CDAB: the low word first) carries; ok is false for any other
// request.
func writeValue(pdu []byte) (int32, bool) {
	if len(pdu) != 10 || pdu[0] != 16 || pdu[1] != 0 || pdu[2] != 2 || pdu[3] != 0 || pdu[4] != 2 || pdu[5] != 4 {
		return 0, false
	}
	lo, hi := uint32(pdu[6])<<8|uint32(pdu[7]), uint32(pdu[8])<<8|uint32(pdu[9])
	return int32(hi<<16 | lo), true
}

// cmdLog is the emulator's side of the commands: it counts the writes of
// each command (by its value) per boot, and lets the test aim a cut at a
// write on the wire, at the request after it (the read-back), or hold the
// bus with slow replies so that a command waits, its id recorded, for its
// turn on the bus.
type cmdLog struct {
	mu        sync.Mutex
	boot      int
	writes    map[int32][]int // by value: the boots that wrote it, one entry a write
	atWrite   func()          // called once, on the serving goroutine, when a preset arrives
	afterNext func()          // called once on the request after the next preset
	armedNext bool
	hold      time.Duration // every read waits this long before the device answers
}

func newCmdLog() *cmdLog { return &cmdLog{writes: map[int32][]int{}} }

func (c *cmdLog) on(slave byte, pdu []byte) {
	c.mu.Lock()
	var fire func()
	hold := time.Duration(0)
	if v, ok := writeValue(pdu); ok && slave == valveSlave {
		c.writes[v] = append(c.writes[v], c.boot)
		fire, c.atWrite = c.atWrite, nil
		if c.afterNext != nil {
			c.armedNext = true
		}
	} else {
		if c.armedNext {
			fire, c.afterNext, c.armedNext = c.afterNext, nil, false
		}
		if len(pdu) > 0 && pdu[0] <= 4 {
			hold = c.hold
		}
	}
	c.mu.Unlock()
	if fire != nil {
		fire() // the cut, before the device acts on the request
	}
	if hold > 0 {
		time.Sleep(hold) // a slow device, under the bus's timeout: the write waits its turn
	}
}

func (c *cmdLog) set(f func(c *cmdLog)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// written returns the boots that wrote value v.
func (c *cmdLog) written(v int32) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.writes[v]...)
}

// cmdPlatform is the platform: it publishes commands straight to the
// broker and collects their results and the gateway's "online".
type cmdPlatform struct {
	c       *brokertest.Client
	topic   string
	led     *ledger // poked at every message, for its waiters
	mu      sync.Mutex
	results map[string][]time.Time
	last    map[string]downlink.Result
	online  []time.Time
}

func newCmdPlatform(t *testing.T, broker string, led *ledger) *cmdPlatform {
	t.Helper()
	base := "fieldlink/POWER/" + gatewayID
	p := &cmdPlatform{topic: base + "/cmd", led: led, results: map[string][]time.Time{}, last: map[string]downlink.Result{}}
	p.c = brokertest.NewClient(t, brokertest.Options{Name: "platform", ID: "powercut-platform", Brokers: []string{broker}, Wait: 10 * time.Second})
	sub := func(topic string, f func([]byte)) {
		p.c.Subscribe(t, topic, func(_ string, payload []byte) { f(payload); led.poke() })
	}
	sub(base+"/cmd/result", func(b []byte) {
		var r downlink.Result
		if err := json.Unmarshal(b, &r); err != nil {
			t.Errorf("a result that does not read: %v: %s", err, b)
			return
		}
		p.mu.Lock()
		p.results[r.ID] = append(p.results[r.ID], time.Now())
		p.last[r.ID] = r
		p.mu.Unlock()
	})
	sub(base+"/status", func(b []byte) {
		if string(b) == "online" {
			p.mu.Lock()
			p.online = append(p.online, time.Now())
			p.mu.Unlock()
		}
	})
	return p
}

func (p *cmdPlatform) send(t *testing.T, payload string) {
	t.Helper()
	p.c.Publish(t, p.topic, []byte(payload), false)
}

// onlineSince reports whether the gateway said "online" at or after since
// (it subscribes to its command topic first).
func (p *cmdPlatform) onlineSince(since time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.online) > 0 && !p.online[len(p.online)-1].Before(since)
}

// answeredSince reports whether id got a result at or after since.
func (p *cmdPlatform) answeredSince(id string, since time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.results[id]
	return len(r) > 0 && !r[len(r)-1].Before(since)
}

// cmdKinds are the moments a commands run's cut aims at: while the
// command waits for the bus, its id recorded (queued: the devices answer
// slowly, the cut falls 10–140 ms after the command was published); as its
// preset reaches the device (write: the cut before the device acts, which
// it then does); at the request after it, the read-back (readback); just
// after its result came, while the result, the audit entry and the
// Command packet are committed (result); and the usual poll cycle's commit
// (commit).
var cmdKinds = []string{"queued", "write", "readback", "result", "commit"}

// cmdStats are a run's command figures.
type cmdStats struct {
	sent, written, twice, afterCut int
	// caught: commands a cut found recorded (on the disk) and unanswered,
	// the window the ledger is for
	caught int
}

// TestCommands cuts the power while the platform's commands run: the
// field gateway as a process on a [LossyFS], as in TestLossy, with a valve
// it writes to and a downlink; POWERCUT_COMMAND_CUTS cuts (default 100).
// Each boot the platform sends again every command it saw no result for,
// and a few it did. No command may reach the device twice,
// a command whose id was recorded before the cut without a result may not
// be written after it, the audit log's hash chain must verify (gateway
// audit -verify) on the disk after the run, and the packets are held to
// TestLossy's rules.
func TestCommands(t *testing.T) {
	mosq := testtool.FindMosquitto(t)
	bin := buildGateway(t)
	cuts := envInt(t, "POWERCUT_COMMAND_CUTS", 100)
	began := time.Now()
	led := newLedger()
	f := runCommands(t, bin, mosq, led, cuts)
	t.Logf("%s, %s", f, time.Since(began).Round(time.Second))
	check(t, f, led, false)
	checkCommands(t, f)
}

// checkCommands fails the test on a command written twice or after a cut
// that found it recorded and unfinished, or on none written at all.
func checkCommands(t *testing.T, f figures) {
	t.Helper()
	if f.cmd.twice > 0 {
		t.Errorf("%d commands reached the device twice", f.cmd.twice)
	}
	if f.cmd.afterCut > 0 {
		t.Errorf("%d commands recorded and unfinished at a cut were written after it", f.cmd.afterCut)
	}
	if f.cmd.written == 0 {
		t.Errorf("no command reached the device: the run tested nothing")
	}
}

func runCommands(t *testing.T, bin, mosq string, led *ledger, cuts int) figures {
	rng, seed := seeded(t)
	dir := t.TempDir()
	lfs, mnt := mountLossyIn(t, dir)
	cl := newCmdLog()
	devs := emutest.Devices(t, append(append([]string(nil), siteDevices[:3]...), "generic-irrigation-valve")...)
	_, emuAddr := emutest.ServeDevices(t, false, devs, emulator.Options{Seed: 1, OnRequest: cl.on})
	broker := testtool.StartMosquitto(t, mosq)
	subscribe(t, broker, led)
	plat := newCmdPlatform(t, broker, led)
	uplink := newLink(t, broker)
	site := commandSite(t, siteFile(t, dir, emuAddr, uplink.Addr(), filepath.Join(mnt, "buffer.db"), false))
	log := gatewayLog(t, dir)
	t.Logf("seed %d (POWERCUT_SEED=%d replays the cuts), %d cuts with commands", seed, seed, cuts)

	var payloads []string    // command n-1's JSON, the same at every delivery
	pending := map[int]int{} // command number: the boot whose cut found it unanswered
	cutAt := map[int]time.Time{}
	byKind := map[string]int{}
	salvages := 0
	var salvaged []string
	issue := func() (int, string) {
		n := len(payloads) + 1
		id := fmt.Sprintf("pc-%d", n)
		payloads = append(payloads, cmdPayload(n))
		return n, id
	}
	for i := 1; i <= cuts+1; i++ {
		cl.set(func(c *cmdLog) { c.boot, c.hold, c.atWrite, c.afterNext, c.armedNext = i, 0, nil, nil, false })
		start := time.Now()
		g := startProcess(t, bin, site, os.Environ(), led, log, i)
		if !led.waitUntil(30*time.Second, func() bool { return g.gone.Load() || g.printed.Load() > 0 && plat.onlineSince(start) }) || g.gone.Load() {
			g.kill(t)
			t.Fatalf("boot %d: no packet stored or no \"online\" within 30s; its stderr:\n%s", i, g.stderr.String())
		}
		// The platform sends again every command it saw no result for,
		// and a few it did (duplicates), and waits for their answers: the
		// gateway takes at most 16 waiting commands.
		var again []string
		for k, p := range payloads {
			id := fmt.Sprintf("pc-%d", k+1)
			if !plat.answeredSince(id, time.Time{}) || rng.IntN(len(payloads)) < 3 {
				plat.send(t, p)
				again = append(again, id)
			}
		}
		if !led.waitUntil(30*time.Second, func() bool {
			for _, id := range again {
				if !plat.answeredSince(id, start) {
					return false
				}
			}
			return true
		}) {
			g.kill(t)
			t.Fatalf("boot %d: the commands sent again (%v) not all answered within 30s; its stderr:\n%s", i, again, g.stderr.String())
		}
		if i > cuts {
			n, id := issue()
			plat.send(t, payloads[n-1])
			ok := led.waitUntil(time.Minute, func() bool {
				return plat.answeredSince(id, start) && len(led.missingLocked()) == 0
			})
			if !ok {
				t.Errorf("the last boot: not every command answered (the last, %s), or not every packet delivered, within a minute", id)
			}
			g.stop(t)
			break
		}
		kind := cmdKinds[rng.IntN(len(cmdKinds))]
		byKind[kind]++
		n, id := issue()
		kill := func() { _ = g.cmd.Process.Kill() }
		var ok bool
		switch kind {
		case "queued":
			cl.set(func(c *cmdLog) { c.hold = 150 * time.Millisecond })
			plat.send(t, payloads[n-1])
			time.Sleep(time.Duration(10+rng.IntN(130)) * time.Millisecond) // the cut's moment in the wait, not a synchronisation
			ok = true
		case "write", "readback":
			fired := make(chan struct{})
			arm := func() { kill(); close(fired) }
			cl.set(func(c *cmdLog) {
				if kind == "write" {
					c.atWrite = arm
				} else {
					c.afterNext = arm
				}
			})
			plat.send(t, payloads[n-1])
			select {
			case <-fired:
				ok = true
			case <-time.After(15 * time.Second):
			}
		case "result":
			plat.send(t, payloads[n-1])
			ok = led.waitUntil(15*time.Second, func() bool { return plat.answeredSince(id, start) })
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond) // the cut's moment, not a synchronisation
		case "commit":
			plat.send(t, payloads[n-1])
			k := g.printed.Load() + int64(1+rng.IntN(6))
			ok = led.waitUntil(15*time.Second, func() bool { return g.gone.Load() || g.printed.Load() >= k })
		}
		if !ok {
			g.kill(t)
			t.Fatalf("cut %d (%s): command %s never got that far within 15s; its stderr:\n%s", i, kind, id, g.stderr.String())
		}
		g.kill(t)
		cutAt[i] = time.Now()
		cl.set(func(c *cmdLog) { c.hold = 0 })
		for k := range payloads {
			if !plat.answeredSince(fmt.Sprintf("pc-%d", k+1), start) {
				pending[k+1] = i
			}
		}
		if s := g.stderr.String(); strings.Contains(s, salvageMark) {
			salvages++
			for _, l := range strings.Split(s, "\n") {
				if strings.Contains(l, salvageMark) || strings.Contains(l, salvageDone) {
					salvaged = append(salvaged, fmt.Sprintf("boot %d: %s", i, l))
				}
			}
		}
		if _, err := lfs.Cut(); err != nil {
			t.Fatalf("cut %d: %v", i, err)
		}
	}
	t.Logf("cuts by kind %v; %d fsyncs served", byKind, lfs.Fsyncs())

	// The disk after the run: the audit log's chain holds, and says which
	// commands were recorded before the cut that found them unanswered.
	if out, err := exec.Command(bin, "audit", "-verify", "-c", site).CombinedOutput(); err != nil {
		t.Errorf("gateway audit -verify: %v\n%s", err, out)
	} else {
		t.Logf("gateway audit -verify: %s", strings.TrimSpace(string(out)))
	}
	received := auditReceived(t, bin, site)

	f := led.figures("lossy-commands", cuts, salvages, salvaged)
	// A packet stored while the last boot stopped waits in the buffer
	// for the next start: not lost.
	left, _ := leftInBuffer(t, bin, site)
	f.lost, f.left = 0, len(left)
	for _, k := range led.missing() {
		if !left[k] {
			f.lost++
		}
	}
	f.cmd = countCommands(t, cl, len(payloads), pending, cutAt, received)
	return f
}

// countCommands counts the sent commands n = 1..sent as cl saw them
// written: those written at all, those written more than once, and those
// written by a boot after the cut that found them unanswered (pending: the
// boot of that cut) although the audit log on the disk (received: the time
// of their "received" entry) recorded them before it (cutAt, by boot).
func countCommands(t *testing.T, cl *cmdLog, sent int, pending map[int]int, cutAt map[int]time.Time, received map[string]time.Time) cmdStats {
	t.Helper()
	st := cmdStats{sent: sent}
	for k := 1; k <= sent; k++ {
		boots := cl.written(cmdValue(k))
		if len(boots) > 0 {
			st.written++
		}
		if len(boots) > 1 {
			st.twice++
			t.Logf("command pc-%d written %d times, by boots %v", k, len(boots), boots)
		}
		b, ok := pending[k]
		if !ok {
			continue
		}
		at, ok := received[fmt.Sprintf("pc-%d", k)]
		if !ok || !at.Before(cutAt[b]) {
			continue // not on the disk before the cut: a redelivery may run it
		}
		st.caught++
		for _, wb := range boots {
			if wb > b {
				st.afterCut++
				t.Logf("command pc-%d: recorded at %s, cut unanswered in boot %d, written by boot %d", k, at.Format(time.RFC3339Nano), b, wb)
				break
			}
		}
	}
	return st
}

// TestCommandCounts: the counts see a command written twice, and one
// written after the cut that found it recorded and unanswered, from the
// presets on the wire (the logic of countCommands and cmdLog, without a
// gateway).
func TestCommandCounts(t *testing.T) {
	preset := func(v int32) []byte {
		u := uint32(v)
		return []byte{16, 0, 2, 0, 2, 4, byte(u >> 8), byte(u), byte(u >> 24), byte(u >> 16)}
	}
	if v, ok := writeValue([]byte{0x10, 0x00, 0x02, 0x00, 0x02, 0x04, 0x1d, 0xc0, 0xff, 0xfe}); !ok || v != -123456 {
		t.Fatalf("writeValue of the downlink tests' FlowTotal frame: %d %v, want -123456", v, ok)
	}
	cl := newCmdLog()
	cut1 := time.Now()
	for boot, values := range map[int][]int32{1: {cmdValue(1), cmdValue(2), cmdValue(3)}, 2: {cmdValue(2), cmdValue(3)}} {
		cl.set(func(c *cmdLog) { c.boot = boot })
		for _, v := range values {
			cl.on(valveSlave, preset(v))
		}
		cl.on(valveSlave, []byte{3, 0, 0, 0, 1}) // a read: not a write
		cl.on(1, preset(cmdValue(4)))            // another slave: not the valve
	}
	// pc-2 ran twice; pc-3 also ran again after a cut that found it
	// recorded; pc-4 never reached the valve.
	st := countCommands(t, cl, 4, map[int]int{3: 1, 4: 1}, map[int]time.Time{1: cut1},
		map[string]time.Time{"pc-3": cut1.Add(-time.Second), "pc-4": cut1.Add(-time.Second)})
	if want := (cmdStats{sent: 4, written: 3, twice: 2, afterCut: 1, caught: 2}); st != want {
		t.Errorf("counts %+v, want %+v", st, want)
	}
}

// commandSite adds the valve and the downlink to a site file written by
// siteFile, in place.
func commandSite(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "buffer: ", valveDevice+"buffer: ", 1) + downlinkYAML
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// auditReceived is, by command id, the time of the first "received"
// entry in the stopped gateway's audit log (gateway audit -json).
func auditReceived(t *testing.T, bin, site string) map[string]time.Time {
	t.Helper()
	out, err := exec.Command(bin, "audit", "-json", "-c", site).Output()
	if err != nil {
		t.Fatalf("gateway audit -json: %v", err)
	}
	got := map[string]time.Time{}
	for line := range strings.Lines(string(out)) {
		var e downlink.AuditEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("gateway audit -json: %v: %.200s", err, line)
		}
		if e.Kind == downlink.KindReceived && e.Command != nil {
			if _, seen := got[e.Command.ID]; !seen {
				got[e.Command.ID] = e.At
			}
		}
	}
	return got
}
