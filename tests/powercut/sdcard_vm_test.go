//go:build powercut

package powercut

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
)

// sdInitTail replaces guestInit from its mount of the disk on: the disk
// goes under a device-mapper device, "card" (/dev/dm-0), whose table the
// host swaps (tests/powercut/dmctl) to make the card fail, and ext4 is
// mounted on it with errors=remount-ro, as a Pi's root is. The gateway
// runs in the background while init reads the host's orders on the
// console (echo off): "dm TARGET ARGS" swaps the card's table (the
// sectors are init's), "fill" and "unfill" fill the card with a file and
// remove it, "ro" makes ext4 meet an error
// (its trigger_fs_error, as a failed metadata write would), which
// errors=remount-ro turns into a read-only card, and says whether a write
// fails, "kill" restarts the gateway after a SIGKILL, "remount" stops
// the gateway, mounts the card again (what a technician's reboot does to
// a card ext4 turned read-only) and starts it. Each order answers one
// "powercut: ..." line.
const sdInitTail = `mkdir -p /data /run
sectors=$(cat /sys/block/vda/size)
/dmctl create card "0 $sectors linear /dev/vda 0"
i=0
while [ ! -b /dev/dm-0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
mount -t ext4 -o errors=remount-ro /dev/dm-0 /data || echo "powercut: cannot mount /dev/dm-0"
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
stty -echo
echo "powercut: guest up, card of $sectors sectors"
start() {
	/gateway run -c /site.yaml -print -log-level warn -log-format text &
	gw=$!
}
start
while read -r verb a; do
	case "$verb" in
	dm) /dmctl load card "0 $sectors $a" ;;
	fill) dd if=/dev/zero of=/data/fill bs=64k 2>/dev/null; sync; echo "powercut: sd filled" ;;
	unfill) rm -f /data/fill; sync; echo "powercut: sd unfilled" ;;
	ro)
		echo "an SD card test's error" > /sys/fs/ext4/dm-0/trigger_fs_error
		if (echo x > /data/.probe) 2>/dev/null; then echo "powercut: sd writable"; else echo "powercut: sd read-only"; fi ;;
	kill) kill -9 $gw; wait $gw; start; echo "powercut: sd restarted" ;;
	remount)
		kill $gw; wait $gw
		umount /data
		if mount -t ext4 -o errors=remount-ro /dev/dm-0 /data; then echo "powercut: sd remounted"; else echo "powercut: sd remount failed"; fi
		start ;;
	esac
done
sleep 100000
`

// sdInit is the SD card run's /init: guestInit up to its mount of the
// disk, then sdInitTail.
func sdInit(t *testing.T) string {
	t.Helper()
	i := strings.Index(guestInit, "mkdir -p /data")
	if i < 0 {
		t.Fatal("guestInit does not mount the disk")
	}
	return guestInit[:i] + sdInitTail
}

// sdFault is one dying card in the VM: the orders that make it fail,
// what the gateway must say, and the orders that make it work again.
type sdFault struct {
	name    string
	fail    []string // orders
	says    string
	recover []string
	// remount: the card recovers only once mounted again (ext4 turned
	// read-only), not within the running gateway; restart: the gateway
	// is killed and restarted on the failing card, and must start.
	remount, restart bool
}

// TestVMSDCard is a dying SD card at the real level: the field build in
// the VM, its buffer on ext4 (errors=remount-ro) over a device-mapper
// device whose table the test swaps: dm-flakey failing every write with
// EIO, ext4 meeting an error and turning itself read-only (errors=
// remount-ro; and a restart on that card), the card filled by a
// file (ENOSPC), dm-delay holding every write 2 s (slow fsyncs). Each is
// one boot: packets pile up during an uplink outage, the card fails, the
// uplink comes back, the card recovers. The gateway must keep running
// and polling, say so, deliver live readings during the fault, go back to
// durable operation, and lose none of the packets it reported stored.
// One line of figures per fault. POWERCUT_SDCARD_VM chooses the faults
// (sdVMFaults).
func TestVMSDCard(t *testing.T) {
	s := vmRequire(t)
	dmctl := buildGuestTool(t, "dmctl")
	for _, f := range []sdFault{
		{name: "eio", fail: []string{"dm flakey /dev/vda 0 0 3600 1 error_writes"}, says: "buffer not durable: the card answers I/O errors",
			recover: []string{"dm linear /dev/vda 0"}, remount: true},
		{name: "readonly", fail: []string{"ro"}, says: "buffer not durable: the card is read-only", remount: true, restart: true},
		{name: "full", fail: []string{"fill"}, says: "buffer not durable: the card is full", recover: []string{"unfill"}},
		{name: "slow", fail: []string{"dm delay /dev/vda 0 0 /dev/vda 0 2000"}, says: "buffer slow: the card's writes take", recover: []string{"dm linear /dev/vda 0"}},
	} {
		if !sdVMFaults[f.name] {
			continue
		}
		t.Run(f.name, func(t *testing.T) { runVMSDCard(t, s, dmctl, f) })
	}
}

// sdVMFaults are the faults TestVMSDCard boots for: POWERCUT_SDCARD_VM,
// a comma-separated list or "all"; by default the read-only card alone
// (about 20 s; all four take a minute and a half), which is the one that made the
// gateway crash-loop.
var sdVMFaults = func() map[string]bool {
	v := os.Getenv("POWERCUT_SDCARD_VM")
	if v == "" {
		v = "readonly"
	}
	if v == "all" {
		v = "eio,readonly,full,slow"
	}
	out := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		out[strings.TrimSpace(f)] = true
	}
	return out
}()

func runVMSDCard(t *testing.T, s vmSetup, dmctl string, f sdFault) {
	began := time.Now()
	led := newLedger()
	var polled []time.Time // wind-1's reading times, stored
	led.seen = func(_ key, p *packet.Packet, fromBroker bool) {
		if !fromBroker && p.DeviceID == "wind-1" {
			polled = append(polled, p.At)
		}
	}
	dir := t.TempDir()
	_, emuAddr := emutest.Serve(t, false, siteDevices...)
	broker := testtool.StartMosquitto(t, s.mosq)
	subscribe(t, broker, led)
	uplink := newLink(t, broker)
	site := siteFile(t, dir, guestEmu, guestMQTT, "/data/buffer.db", false)
	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitramfsWith(t, initrd, s, site, sdInit(t), map[string]string{"dmctl": dmctl})
	disk := newVMDisk(t, s.mkfs, dir)
	args := qemuArgs(s, initrd, disk, "console=ttyS0 quiet loglevel=3 panic=-1", emuAddr, uplink.Addr())
	log := consoleLog(t, dir)
	r, w, err := os.Pipe() // an *os.File, which qemu gets as it is
	if err != nil {
		t.Fatal(err)
	}
	v := bootVMInput(t, s.qemu, args, led, log, 1, r)
	r.Close()
	t.Cleanup(func() { w.Close() })
	if !led.waitUntil(bootLimit, func() bool { return v.gone.Load() || led.received >= 20 }) || v.gone.Load() {
		v.kill(t)
		t.Fatalf("no packet delivered within %v of qemu's start (qemu exited: %v); console:\n%s", bootLimit, v.gone.Load(), tail(v.console.String(), 4000))
	}
	t.Logf("up %s after qemu's start", time.Since(v.start).Round(100*time.Millisecond))
	console := func() string { return v.console.String() }
	// order sends one order and waits for its answer line.
	order := func(o, answer string) {
		t.Helper()
		before := strings.Count(console(), answer)
		fmt.Fprintln(w, o)
		if !testtool.Eventually(2*time.Minute, 50*time.Millisecond, func() bool { return strings.Count(console(), answer) > before || v.gone.Load() }) || v.gone.Load() {
			t.Fatalf("order %q: no %q within 2 minutes (qemu exited: %v); console:\n%s", o, answer, v.gone.Load(), tail(console(), 4000))
		}
		if strings.Contains(console(), "powercut: dm error") {
			t.Fatalf("order %q: %s", o, tail(console(), 2000))
		}
	}
	answer := func(o string) string {
		switch {
		case strings.HasPrefix(o, "dm "):
			return "powercut: dm load card ok"
		case o == "fill":
			return "powercut: sd filled"
		case o == "unfill":
			return "powercut: sd unfilled"
		case o == "kill":
			return "powercut: sd restarted"
		case o == "ro":
			return "powercut: sd "
		}
		return "powercut: sd remount"
	}

	// A backlog on the card: the uplink down for 3 s.
	uplink.set(false)
	time.Sleep(3 * time.Second)
	faultAt := time.Now()
	for _, o := range f.fail {
		order(o, answer(o))
	}
	if !testtool.Eventually(time.Minute, 50*time.Millisecond, func() bool { return strings.Contains(console(), f.says) || v.gone.Load() }) {
		t.Fatalf("the gateway did not say %q within a minute of the fault; console:\n%s", f.says, tail(console(), 4000))
	}
	if f.restart {
		// ext4 turned itself read-only, and stays so on a card that works
		// again: a restart there must start, not durable.
		const ro = "buffer not durable: the card is read-only"
		if strings.Contains(console(), "powercut: sd writable") {
			t.Fatalf("ext4 did not turn read-only; console:\n%s", tail(console(), 4000))
		}
		said := strings.Count(console(), ro)
		order("kill", answer("kill"))
		if !testtool.Eventually(time.Minute, 50*time.Millisecond, func() bool { return strings.Count(console(), ro) > said }) {
			t.Fatalf("the gateway restarted on the read-only card did not say %q within a minute; console:\n%s", ro, tail(console(), 4000))
		}
	}
	uplink.set(true)
	r0 := led.receivedCount()
	time.Sleep(5 * time.Second)
	during := led.receivedCount() - r0
	if c := console(); strings.Contains(c, "the gateway exited") || v.gone.Load() {
		t.Fatalf("the gateway exited during the fault; console:\n%s", tail(c, 4000))
	}
	if during == 0 {
		t.Errorf("no reading delivered during the fault")
	}

	clearedAt := time.Now()
	for _, o := range f.recover {
		order(o, answer(o))
	}
	if f.remount {
		order("remount", "powercut: sd remount")
		if strings.Contains(console(), "powercut: sd remount failed") {
			t.Fatalf("the card cannot be mounted again; console:\n%s", tail(console(), 4000))
		}
		// A fresh start on the card: durable once it stores a packet.
		n := v.printed.Load()
		if !led.waitUntil(time.Minute, func() bool { return v.printed.Load() > n+3 }) {
			t.Fatalf("nothing stored within a minute of the remount")
		}
	} else if !testtool.Eventually(3*time.Minute, 50*time.Millisecond, func() bool { return strings.Contains(console(), "buffer durable again") }) {
		t.Fatalf("not durable again within 3 minutes of the card's recovery; console:\n%s", tail(console(), 4000))
	}
	back := time.Since(clearedAt)
	caughtUp(t, led, &polled, clearedAt)
	lost, gaps, stored := settle(t, led)
	v.kill(t)
	led.mu.Lock()
	ratePre, rateFault := pollRate(polled, faultAt.Add(-3*time.Second), faultAt), pollRate(polled, faultAt, clearedAt)
	led.mu.Unlock()
	line := fmt.Sprintf("powercut sdcard-vm %s: %d readings delivered during the fault, %.1f s back to durable operation, %d packets lost of %d stored (%d seqs skipped by refused commits); wind-1 polled %.1f times/s before the fault, %.1f during it; %s",
		f.name, during, back.Seconds(), lost, stored, gaps, ratePre, rateFault, time.Since(began).Round(time.Second))
	t.Log(line)
	fmt.Println(line)
	if !f.restart && rateFault < ratePre/2 {
		t.Errorf("polling slowed by the card: wind-1 polled %.1f times/s during the fault, %.1f before", rateFault, ratePre)
	}
}
