//go:build powercut

package powercut

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/kclock"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors/emulator"
)

// clockInitTail replaces the end of guestInit (guestInitWith), from the
// gateway's start:
// the gateway runs in the background while init reads the host's orders
// on the console (echo off, so that nothing the host types lands in the
// middle of a packet's line): "clock ARGS" runs /clockctl ARGS; "audit"
// stops the gateway, runs gateway audit -verify on the disk, lists the
// packets left in the buffer (epoch and seq) and syncs.
// POWERCUT_CLOCK (from the kernel's command line), when set, is the wall
// clock init sets before the gateway starts.
const clockInitTail = `stty -echo
if [ -n "$POWERCUT_CLOCK" ]; then /clockctl set "$POWERCUT_CLOCK"; fi
echo "powercut: guest up, clock $(date -u +%%s)"
/gateway run -c /site.yaml -print -log-level warn -log-format text &
gw=$!
while read -r verb a b; do
	case "$verb" in
	clock) /clockctl $a $b ;;
	audit)
		kill $gw; wait $gw
		/gateway audit -verify -c /site.yaml > /tmp/audit 2>&1; s=$?
		sed 's/^/powercut: audit: /' /tmp/audit
		/gateway buffer export -c /site.yaml 2>/dev/null | sed -n 's/.*"Seq":\([0-9]*\).*"Epoch":"\([0-9a-f]*\)".*/powercut: left: \2 \1/p'
		sync
		echo "powercut: audit status $s" ;;
	esac
done
echo "powercut: console input closed"
sleep 100000
`

// stamps are Date, Time and TS in a packet's line, and its ClockUnsynced
// mark: what a re-stamp changes.
var stamps = regexp.MustCompile(`"(Date|Time|TS)":"[^"]*",?|,?"ClockUnsynced":"True"`)

func unstamped(line []byte) []byte { return stamps.ReplaceAll(line, nil) }

// stampLog keeps, per packet, the host's time when the guest reported it
// stored, the stamp it was stored with, and what the broker delivered.
type stampLog struct {
	mu     sync.Mutex
	stored map[key]stampSeen
	recv   map[key][]stampSeen
	marked int // stored lines that carried the mark
}

type stampSeen struct {
	host   time.Time // when the host saw the line
	at     time.Time // the packet's TS
	marked bool
}

func newStampLog() *stampLog {
	return &stampLog{stored: map[key]stampSeen{}, recv: map[key][]stampSeen{}}
}

// seen is the ledger's hook; it runs under the ledger's lock.
func (s *stampLog) seen(k key, p *packet.Packet, fromBroker bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := stampSeen{host: time.Now(), at: p.At, marked: p.ClockUnsynced}
	if fromBroker {
		s.recv[k] = append(s.recv[k], x)
		return
	}
	if _, ok := s.stored[k]; !ok {
		s.stored[k] = x
		if x.marked {
			s.marked++
		}
	}
}

// storedSince counts the lines stored after since, marked or not.
func (s *stampLog) storedSince(since time.Time, marked bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, x := range s.stored {
		if x.host.After(since) && x.marked == marked {
			n++
		}
	}
	return n
}

// stampStats are the clock run's stamp figures.
type stampStats struct {
	marked         int // stored with the mark
	deliveredMark  int // delivered with it
	restamped      int // stored with the mark, delivered without it
	as1970         int // delivered or stored without the mark and before kclock.MinTrue
	off            int // without the mark, and more than stampSlack from the host's time
	offExamples    []string
	unmarkedStored int
}

// stampSlack is how far an unmarked stamp may be from the host's time
// when the guest reported the packet stored: the reading comes before its
// commit and the report, and the guest's clock is set from the host's
// over the serial console, under TCG.
const stampSlack = 30 * time.Second

// count checks every stamp: a packet without the mark, stored or
// delivered, carries a true time (within stampSlack of when the host saw
// it stored); a packet marked when stored and delivered without the mark
// was re-stamped.
func (s *stampLog) count() stampStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := stampStats{marked: s.marked}
	bad := func(k key, what string, x stampSeen, host time.Time) {
		if x.at.Before(kclock.MinTrue) {
			st.as1970++
		} else {
			st.off++
		}
		if len(st.offExamples) < 10 {
			st.offExamples = append(st.offExamples, fmt.Sprintf("%s %v: TS %s, stored at %s by the host's clock", what, k, x.at.UTC().Format(time.RFC3339), host.UTC().Format(time.RFC3339)))
		}
	}
	ok := func(x stampSeen, host time.Time) bool {
		return !x.at.Before(kclock.MinTrue) && x.at.Sub(host).Abs() <= stampSlack
	}
	for k, x := range s.stored {
		if !x.marked {
			st.unmarkedStored++
			if !ok(x, x.host) {
				bad(k, "stored", x, x.host)
			}
		}
	}
	for k, xs := range s.recv {
		first, known := s.stored[k]
		restamped := false
		for _, x := range xs {
			if x.marked {
				st.deliveredMark++
				continue
			}
			host := x.host // not reported stored (cut before the report): the delivery bounds it
			if known {
				host = first.host
			}
			if !ok(x, host) {
				bad(k, "delivered", x, host)
			}
			if known && first.marked {
				restamped = true
			}
		}
		if restamped {
			st.restamped++
		}
	}
	return st
}

// TestVMClock boots the VM with a wrong clock and has it set, stepped and
// synchronised as NTP and fake-hwclock would (tests/powercut/clockctl, run
// by the guest's init on the host's orders), across two cuts: the first
// boot in 1970, synchronised, then stepped back an hour (unsynchronised)
// and cut; the second an hour behind, synchronised, stepped an hour ahead,
// synchronised back, and cut; the third at the RTC's time. The platform's
// commands are sent, and sent again, across the steps and the cuts.
// Packets are held to rules 1-3 with their stamps aside (a re-stamp
// changes them); no packet may be stored or delivered without the
// ClockUnsynced mark and a time that is not true (1970, an hour off); the
// re-stamp must have run; no command may reach the device twice; gateway
// audit -verify runs in the guest at the end.
func TestVMClock(t *testing.T) {
	s := vmRequire(t)
	clockctl := buildGuestTool(t, "clockctl")
	began := time.Now()

	led, sl := newLedger(), newStampLog()
	led.norm, led.seen = unstamped, sl.seen
	dir := t.TempDir()
	cl := newCmdLog()
	devs := emutest.Devices(t, append(append([]string(nil), siteDevices[:3]...), "generic-irrigation-valve")...)
	_, emuAddr := emutest.ServeDevices(t, false, devs, emulator.Options{Seed: 1, OnRequest: cl.on})
	broker := testtool.StartMosquitto(t, s.mosq)
	subscribe(t, broker, led)
	plat := newCmdPlatform(t, broker, led)
	uplink := newLink(t, broker)
	site := commandSite(t, siteFile(t, dir, guestEmu, guestMQTT, "/data/buffer.db", false))
	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitramfsWith(t, initrd, s, site, guestInitWith(t, "/gateway run ", clockInitTail), map[string]string{"clockctl": clockctl})
	disk := newVMDisk(t, s.mkfs, dir)
	args := func(clock string) []string {
		cmdline := "console=ttyS0 quiet loglevel=3 panic=-1"
		if clock != "" {
			cmdline += " POWERCUT_CLOCK=" + clock
		}
		return qemuArgs(s, initrd, disk, cmdline, emuAddr, uplink.Addr())
	}
	log := consoleLog(t, dir)

	var payloads []string
	issue := func() string {
		n := len(payloads) + 1
		id := fmt.Sprintf("pc-%d", n)
		payloads = append(payloads, cmdPayload(n))
		return id
	}
	var (
		v        *vm
		in       io.WriteCloser
		steps    []string // what was done, for the figures
		salvages int
	)
	// cut is the power cut: qemu killed, the boot's salvage counted.
	cut := func() {
		v.kill(t)
		if strings.Contains(v.console.String(), salvageMark) {
			salvages++
		}
	}
	// order has the guest run clockctl and waits for its answer.
	order := func(verb string, a ...any) {
		t.Helper()
		before := strings.Count(v.console.String(), "powercut: clock "+verb)
		fmt.Fprintf(in, "clock %s %s\n", verb, strings.TrimSpace(fmt.Sprintln(a...)))
		testtool.WaitFor(t, time.Minute, "the guest's clockctl "+verb, func() bool {
			c := v.console.String()
			if strings.Contains(c, "powercut: clock error") {
				t.Fatalf("clockctl %s: %s", verb, tail(c, 2000))
			}
			return strings.Count(c, "powercut: clock "+verb) > before || v.gone.Load()
		})
		steps = append(steps, strings.TrimSpace(fmt.Sprintln(append([]any{verb}, a...)...)))
	}
	// stored waits until n more packets, marked or not, are reported
	// stored from now on.
	stored := func(n int, marked bool, what string) {
		t.Helper()
		since := time.Now()
		if !led.waitUntil(2*time.Minute, func() bool { return v.gone.Load() || sl.storedSince(since, marked) >= n }) || v.gone.Load() {
			t.Fatalf("boot %d: not %d packets stored %s within 2 minutes (qemu exited: %v)", v.n, n, what, v.gone.Load())
		}
	}
	// sendAll sends every command so far again, then id (if any), and
	// waits for all their answers.
	sendAll := func(id string) {
		t.Helper()
		since := time.Now()
		for _, p := range payloads {
			plat.send(t, p)
		}
		if !led.waitUntil(time.Minute, func() bool {
			for k := range payloads {
				if !plat.answeredSince(fmt.Sprintf("pc-%d", k+1), since) {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("boot %d: the commands (the last %s) not all answered within a minute", v.n, id)
		}
	}
	delivered := func() {
		t.Helper()
		if !led.waitUntil(2*time.Minute, func() bool { return v.gone.Load() || len(led.missingLocked()) == 0 }) || v.gone.Load() {
			t.Fatalf("boot %d: not every stored packet delivered within 2 minutes: %v", v.n, led.missing())
		}
	}
	boot := func(n int, clock string) {
		t.Helper()
		// An *os.File, which qemu gets as it is: exec's Wait would wait
		// for a copying goroutine on anything else.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		in = w
		v = bootVMInput(t, s.qemu, args(clock), led, log, n, r)
		r.Close()
		t.Cleanup(func() { w.Close() })
		start := time.Now()
		if !led.waitUntil(bootLimit, func() bool { return v.gone.Load() || v.printed.Load() > 0 && plat.onlineSince(v.start) }) || v.gone.Load() {
			v.kill(t)
			t.Fatalf("boot %d: no packet stored and no \"online\" within %v (qemu exited: %v); console:\n%s", n, bootLimit, v.gone.Load(), tail(v.console.String(), 4000))
		}
		t.Logf("boot %d (clock %q): up %s after qemu's start", n, clock, time.Since(start).Round(100*time.Millisecond))
	}
	now := func() int64 { return time.Now().Unix() }

	// Boot 1: 1970, unsynchronised, as a Pi without fake-hwclock.
	boot(1, "86400")
	stored(3, true, "marked (1970)")
	sendAll(issue()) // pc-1: issued in the gateway's future, refused
	uplink.set(false)
	stored(15, true, "marked during an outage")
	order("sync", now()) // NTP: the clock stepped forward to the truth, synchronised
	stored(10, false, "unmarked once synchronised")
	uplink.set(true)
	delivered()
	sendAll(issue())       // pc-2 runs
	order("step", "-3600") // the clock put an hour back, unsynchronised
	stored(5, true, "marked an hour behind")
	sendAll("")
	uplink.set(false)
	stored(10, true, "marked an hour behind, during an outage")
	cut()
	uplink.set(true)

	// Boot 2: fake-hwclock's hour behind.
	boot(2, fmt.Sprint(now()-3600))
	uplink.set(false)
	stored(10, true, "marked an hour behind")
	order("sync", now())
	stored(5, false, "unmarked once synchronised")
	uplink.set(true)
	delivered()
	sendAll("")           // pc-1 runs now, pc-2 is answered from the ledger
	order("step", "3600") // an hour ahead, unsynchronised
	stored(5, true, "marked an hour ahead")
	sendAll(issue())     // pc-3: issued an hour ago by the gateway's clock, refused
	order("sync", now()) // back an hour, synchronised
	stored(5, false, "unmarked once synchronised again")
	sendAll("")
	delivered()
	cut()

	// Boot 3: the RTC's time, unsynchronised, and no step.
	boot(3, "")
	sendAll(issue())
	delivered()
	fmt.Fprintf(in, "audit\n")
	testtool.WaitFor(t, 2*time.Minute, "gateway audit -verify in the guest", func() bool {
		return strings.Contains(v.console.String(), "powercut: audit status") || v.gone.Load()
	})
	c := v.console.String()
	if !strings.Contains(c, "powercut: audit status 0") {
		t.Errorf("gateway audit -verify in the guest failed:\n%s", tail(c, 3000))
	} else {
		for _, l := range strings.Split(c, "\n") {
			if strings.Contains(l, "powercut: audit: audit log") {
				t.Logf("%s", strings.TrimSpace(l))
			}
		}
	}
	cut()

	f := led.figures("vm-clock", 2, salvages, nil)
	// Packets stored while the gateway stopped for the audit wait in the
	// buffer: not lost.
	left := map[key]bool{}
	for _, l := range strings.Split(c, "\n") {
		var k key
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "powercut: left: %s %d", &k.epoch, &k.seq); err == nil {
			left[k] = true
		}
	}
	f.lost, f.left = 0, len(left)
	for _, k := range led.missing() {
		if !left[k] {
			f.lost++
		}
	}
	f.cmd = countCommands(t, cl, len(payloads), nil, nil, nil)
	st := sl.count()
	t.Logf("clock steps %s", strings.Join(steps, "; "))
	t.Logf("%s; stamps: stored marked %d, delivered marked %d, re-stamped %d, without the mark: stored %d, as if 1970 were true %d, off by more than %v %d, %s",
		f, st.marked, st.deliveredMark, st.restamped, st.unmarkedStored, st.as1970, stampSlack, st.off, time.Since(began).Round(time.Second))
	check(t, f, led, false)
	if f.cmd.twice > 0 {
		t.Errorf("%d commands reached the device twice across the clock's steps and the cuts", f.cmd.twice)
	}
	if f.cmd.written == 0 {
		t.Errorf("no command reached the device")
	}
	if st.as1970+st.off > 0 {
		t.Errorf("%d packets without the ClockUnsynced mark stamped before 2026, %d more than %v off the host's clock: %v", st.as1970, st.off, stampSlack, st.offExamples)
	}
	if st.restamped == 0 {
		t.Errorf("no marked packet was delivered re-stamped")
	}
}
