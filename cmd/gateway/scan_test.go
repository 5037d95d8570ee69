package main

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/modbus"
)

// scanTimeout is -timeout for the tests' scans, whose replies they count
// or identify: the emulator answering them runs on the same machine, which
// may be loaded and running the tests under -race, and a reply later than
// -timeout is lost to the scan (a timeout) or, read at the next request, a
// garbled reply: a 100 ms bound lost replies whose wire time is 20 ms at
// 9600 baud. A silent id costs the scan this much.
const scanTimeout = time.Second

// Scan names what it found: a device that answers Read Device
// Identification is matched to its profile for sure, one that does not by
// the values its registers hold; what it prints passes check.
func TestScanNamesWhatItFound(t *testing.T) {
	_, addr := serve(t, true, "renke-rs-fxjt-n01", "generic-mine-multigas", "vaisala-gmp252")
	code, out, errOut := gw(t, "scan", "-url", "rtuovertcp://"+addr+"?baud=9600", "-slaves", "1-4", "-timeout", scanTimeout.String())
	if code != 0 {
		t.Fatalf("scan: %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		`# slave 1 identifies itself: vendor "Jinan Renke (Shandong Renke Control Technology)", product "RS-FXJT-N01"`,
		"- {name: renke-rs-fxjt-n01-1, profile: renke-rs-fxjt-n01, slave: 1}   # sure: the device names its vendor",
		"- {name: generic-mine-multigas-2, profile: generic-mine-multigas, slave: 2}   # likely: all 6 registers hold plausible values",
		"- {name: vaisala-gmp252-3, profile: vaisala-gmp252, slave: 3}   # sure:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scan output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "slave 2 identifies itself") {
		t.Errorf("a generic device that does not implement 43/14 was identified:\n%s", out)
	}
	_, frag, _ := strings.Cut(out, "\n# A site-file fragment")
	file := writeSite(t, "site: {id: \"001\"}\ngateway: {id: gw-scan}\n# A site-file fragment"+frag)
	if code, out, errOut := gw(t, "check", "-c", file); code != 0 || !strings.Contains(out, "3 devices") {
		t.Fatalf("check of scan's fragment: %d\n%s\n%s", code, out, errOut)
	}
}

// Scan's promise of how long it takes at most holds: every request it
// sends is bounded by -timeout, so the requests the devices see are at
// most the bound it says over -timeout, identification included (a
// sweep said to take at most about 250ms took 7.1 s, identifying what it
// found).
func TestScanKeepsItsBound(t *testing.T) {
	var seen atomic.Int64
	_, addr := emutest.ServeDevices(t, true, emutest.Devices(t, "renke-rs-fxjt-n01", "generic-mine-multigas"),
		emulator.Options{OnRequest: func(byte, []byte) { seen.Add(1) }})
	const timeout = scanTimeout
	code, out, errOut := gw(t, "scan", "-url", "rtuovertcp://"+addr+"?baud=9600", "-slaves", "1-5", "-timeout", timeout.String())
	if code != 0 {
		t.Fatalf("scan: %d\n%s\n%s", code, out, errOut)
	}
	found := int64(strings.Count(out, "found slave "))
	if found != 2 {
		t.Fatalf("found %d slaves, want 2:\n%s", found, out)
	}
	bound := func(before, after string) time.Duration {
		_, s, ok := strings.Cut(errOut, before)
		if !ok {
			return 0
		}
		s, _, _ = strings.Cut(s, after)
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return d
	}
	sweep, each := bound("at most about ", " "), bound("then up to ", " for each device found")
	promised := int64(sweep/timeout) + found*int64(each/timeout)
	if n := seen.Load(); n > promised || sweep == 0 {
		t.Errorf("the devices saw %d requests of at most %v each; the bound scan promised (sweep %v, %v per device found, %d found) allows %d:\n%s", n, timeout, sweep, each, found, promised, errOut)
	}
}

// servePty serves devs with the project's emulator on one end of a socat
// pty pair and returns the other end's path: a serial line on which every
// baud the master opens it at reaches the devices (a pty has no baud).
func servePty(t *testing.T, devs []emulator.Device, opt emulator.Options) string {
	t.Helper()
	return servePtyEmu(t, devs, opt, nil)
}

// servePtyEmu is servePty that stores the emulator in emu, if not nil,
// before it serves, for an OnRequest hook to read its counters.
func servePtyEmu(t *testing.T, devs []emulator.Device, opt emulator.Options, emuOut *atomic.Pointer[emulator.Emulator]) string {
	t.Helper()
	emu, err := emulator.New(devs, opt)
	if err != nil {
		t.Fatal(err)
	}
	if emuOut != nil {
		emuOut.Store(emu)
	}
	return emutest.ServePty(t, emu, 9600, 'N')
}

// Scanning one serial port at several bauds prints one bus for the port,
// and the fragment passes check as it is (the same port at three bauds
// printed three buses with the same device names: six errors).
func TestScanFragmentOneBusPerPort(t *testing.T) {
	line := servePty(t, emutest.Devices(t, "renke-rs-fxjt-n01", "generic-mine-multigas"), emulator.Options{Seed: 1})
	code, out, errOut := gw(t, "scan", "-url", "rtu://"+line+"?baud=9600", "-bauds", "9600,19200,4800", "-slaves", "1-3", "-timeout", scanTimeout.String())
	if code != 0 {
		t.Fatalf("scan: %d\n%s\n%s", code, out, errOut)
	}
	_, frag, ok := strings.Cut(out, "\n# A site-file fragment")
	if !ok {
		t.Fatalf("scan printed no fragment:\n%s", out)
	}
	if n := strings.Count(frag, "\n  - name: "); n != 1 {
		t.Errorf("the fragment has %d buses for one port, want 1:\n%s", n, frag)
	}
	file := writeSite(t, "site: {id: \"001\"}\ngateway: {id: gw-scan}\n# A site-file fragment"+frag)
	if code, cout, cerr := gw(t, "check", "-c", file); code != 0 || !strings.Contains(cout, "2 devices") {
		t.Fatalf("check of scan's fragment: %d\n%s\n%s\nthe fragment:%s", code, cout, cerr, frag)
	}
	if testing.Verbose() {
		t.Log(frag)
	}
}

// A slave that answers at several bauds, some replies garbled (the
// emulator's bad-CRC fault), is put at the baud whose replies were
// cleanest, and the scan counted every corrupted reply the device sent.
func TestScanCleanBaudWins(t *testing.T) {
	devs := emutest.Devices(t, "generic-mine-multigas")
	devs[0].Faults.BadCRC = 0.4
	var emu atomic.Pointer[emulator.Emulator]
	var sweptCorrupted atomic.Int64
	sweptCorrupted.Store(-1)
	opt := emulator.Options{Seed: 1, OnRequest: func(_ byte, pdu []byte) {
		// Identification (43/14 first) starts once every baud was swept.
		if pdu[0] == 0x2B && sweptCorrupted.Load() < 0 {
			sweptCorrupted.Store(int64(emu.Load().Stats().Slaves[1].CRCCorrupted))
		}
	}}
	line := servePtyEmu(t, devs, opt, &emu)
	code, out, errOut := gw(t, "scan", "-url", "rtu://"+line+"?baud=9600", "-bauds", "9600,19200,4800,2400", "-slaves", "1-2", "-timeout", scanTimeout.String())
	if code != 0 {
		t.Fatalf("scan: %d\n%s\n%s", code, out, errOut)
	}
	_, frag, _ := strings.Cut(out, "\n# A site-file fragment")
	var chosen [2]int
	var others [][2]int
	total := 0
	for _, l := range strings.Split(frag, "\n") {
		var setting string
		var c, g int
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "# at %s 8N1: %d clean replies, %d garbled;", &setting, &c, &g); err == nil {
			chosen = [2]int{c, g}
		} else if i := strings.Index(l, "answered, "); i >= 0 {
			if _, err := fmt.Sscanf(l[i:], "answered, %d clean replies, %d garbled", &c, &g); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			others = append(others, [2]int{c, g})
		} else {
			continue
		}
		total += g
	}
	if len(others) == 0 || total == 0 {
		t.Fatalf("want the slave at several bauds with some replies garbled:\n%s\n%s", frag, errOut)
	}
	if int64(total) != sweptCorrupted.Load() {
		t.Errorf("the scan counted %d garbled replies over the bauds; the emulator corrupted %d:\n%s\n%s", total, sweptCorrupted.Load(), frag, errOut)
	}
	for _, o := range others {
		if chosen[1]*(o[0]+o[1]) > o[1]*(chosen[0]+chosen[1]) {
			t.Errorf("the bus is at a baud with %d of %d replies garbled over one with %d of %d:\n%s", chosen[1], chosen[0]+chosen[1], o[1], o[0]+o[1], frag)
		}
	}
	if testing.Verbose() {
		t.Log(frag)
	}
}

// A slave that answers after -timeout is there, slower than the timeout:
// its reply, whole and with a valid CRC, read while the next id's reply is
// awaited, is a late answer from it, not a garbled reply (the scan said a
// device might be there at another baud rate or parity, then that no
// device answered). The scan names the slave and suggests a -timeout
// longer than the slave took, whether its reply was read whole or cut by a
// later request's deadline.
func TestScanNamesLateSlaves(t *testing.T) {
	const timeout = 200 * time.Millisecond
	devs := emutest.Devices(t, "generic-mine-multigas")
	devs[0].Faults.Turnaround = 3 * timeout / 2 // lands in the next id's wait, or a later one's under load
	line := servePty(t, devs, emulator.Options{Seed: 1})
	code, out, errOut := gw(t, "scan", "-url", "rtu://"+line+"?baud=9600", "-bauds", "9600", "-slaves", "1-5", "-timeout", timeout.String(), "-identify=false")
	if code == 0 {
		t.Errorf("a scan that found no device in time succeeded:\n%s\n%s", out, errOut)
	}
	if strings.Contains(errOut, "garbled") || strings.Contains(errOut, "another baud rate or parity") {
		t.Errorf("a late reply was called garbled:\n%s", errOut)
	}
	_, s, ok := strings.Cut(errOut, "# slave 1 answered late (after ")
	if !ok {
		t.Fatalf("the scan does not say slave 1 answered late:\n%s\n%s", out, errOut)
	}
	_, s, ok = strings.Cut(s, "): give -timeout ")
	if !ok {
		t.Fatalf("the scan suggests no -timeout:\n%s", errOut)
	}
	s, _, _ = strings.Cut(s, "\n")
	suggested, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("suggested -timeout %q: %v", s, err)
	}
	if suggested <= devs[0].Faults.Turnaround {
		t.Errorf("suggested -timeout %v, no longer than the slave's turnaround %v:\n%s", suggested, devs[0].Faults.Turnaround, errOut)
	}
}

// Without -timeout, a scan at a low baud gives each request the wire
// time of its frames on top of the device's time to answer: the 100 ms
// that serves at 9600 baud left a device at 2400 baud, where a one-register
// read takes 62 ms on the wire (8 and 7 characters of 10 bits) and the
// silences before each frame 15 ms each, less than 30 ms to answer.
func TestScanDefaultTimeoutGrowsAtLowBaud(t *testing.T) {
	line := servePty(t, emutest.Devices(t, "generic-mine-multigas"), emulator.Options{Seed: 1})
	code, out, errOut := gw(t, "scan", "-url", "rtu://"+line+"?baud=2400", "-bauds", "2400", "-slaves", "1", "-identify=false")
	if code != 0 {
		t.Fatalf("scan: %d\n%s\n%s", code, out, errOut)
	}
	_, s, ok := strings.Cut(errOut, "a silent id costs -timeout ")
	if !ok {
		t.Fatalf("the scan does not say its timeout:\n%s", errOut)
	}
	s, _, _ = strings.Cut(s, ")")
	got, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	char := modbus.CharTime(2400, 10)
	if wire := 15*char + 2*modbus.Silence(2400); got < wire+100*time.Millisecond {
		t.Errorf("the default -timeout at 2400 baud is %v; a one-register read takes %v on the wire, leaving %v to answer, want 100ms", got, wire, got-wire)
	}
}
