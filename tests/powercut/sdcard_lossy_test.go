//go:build powercut

package powercut

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
)

// TestSDCardLossy is a dying SD card at the fast level: the field gateway
// as a process on a [LossyFS] that starts to fail (EIO on fsync, read-only,
// full, fsync taking 2 s) while packets wait in the buffer for an uplink
// that is down. The gateway must keep polling and running, say so in its
// log, deliver the live readings once the uplink is back, go back to
// durable operation once the card works again, and lose none of the packets
// it reported stored. The read-only card is also restarted on: the gateway
// must start, not exit. One line of figures per fault.
func TestSDCardLossy(t *testing.T) {
	mosq := testtool.FindMosquitto(t)
	bin := buildGateway(t)
	for _, tc := range []struct {
		name    string
		fault   Fault
		says    string
		restart bool
	}{
		{"eio", Fault{FsyncErr: syscall.EIO}, "buffer not durable: the card answers I/O errors", false},
		{"readonly", Fault{WriteErr: syscall.EROFS}, "buffer not durable: the card is read-only", true},
		{"full", Fault{WriteErr: syscall.ENOSPC}, "buffer not durable: the card is full", false},
		{"slow", Fault{FsyncDelay: 2 * time.Second}, "buffer slow: the card's writes take", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runSDCard(t, bin, mosq, tc.name, tc.fault, tc.says, tc.restart)
		})
	}
}

func runSDCard(t *testing.T, bin, mosq, name string, fault Fault, says string, restart bool) {
	dir := t.TempDir()
	lfs := mountLossy(t)
	mnt := lfs.dir
	led := newLedger()
	// The reading times of one device's stored packets: its poll timing.
	var polled []time.Time
	led.seen = func(_ key, p *packet.Packet, fromBroker bool) {
		if !fromBroker && p.DeviceID == "wind-1" {
			polled = append(polled, p.At)
		}
	}
	_, emuAddr := emutest.Serve(t, false, siteDevices...)
	broker := testtool.StartMosquitto(t, mosq)
	subscribe(t, broker, led)
	uplink := newLink(t, broker)
	site := siteFile(t, dir, emuAddr, uplink.Addr(), filepath.Join(mnt, "buffer.db"), false)
	var log testtool.SyncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", log.String())
		}
	})
	env := os.Environ()
	g := startProcess(t, bin, site, env, led, &log, 1)
	defer func() { g.stop(t) }()
	if !led.waitUntil(30*time.Second, func() bool { return led.received >= 30 }) {
		t.Fatalf("nothing delivered in 30 s")
	}

	// A backlog on the card: the uplink is down for 2 s.
	uplink.set(false)
	beganAt := time.Now()
	time.Sleep(2 * time.Second)

	lfs.SetFault(fault)
	faultAt := time.Now()
	if !testtool.Eventually(20*time.Second, 50*time.Millisecond, func() bool { return strings.Contains(log.String(), says) }) {
		t.Fatalf("the gateway did not say %q within 20 s of the fault", says)
	}
	if restart {
		// A restart on the still faulty card starts, not durable.
		g.kill(t)
		g = startProcess(t, bin, site, env, led, &log, 2)
		if !testtool.Eventually(20*time.Second, 50*time.Millisecond, func() bool { return strings.Count(log.String(), says) >= 2 }) {
			t.Fatalf("the gateway restarted on the faulty card did not say %q within 20 s", says)
		}
	}
	uplink.set(true)
	r0 := led.receivedCount()
	time.Sleep(5 * time.Second)
	during := led.receivedCount() - r0
	if g.gone.Load() {
		t.Fatalf("the gateway exited during the fault")
	}
	if during == 0 {
		t.Errorf("no reading delivered during the fault")
	}
	if n := strings.Count(log.String(), says); n > 1+btoi(restart) {
		t.Errorf("%q said %d times: once per change of state (and once per start)", says, n)
	}

	lfs.SetFault(Fault{})
	clearedAt := time.Now()
	if !testtool.Eventually(90*time.Second, 50*time.Millisecond, func() bool { return strings.Contains(log.String(), "buffer durable again") }) {
		t.Fatalf("not durable again within 90 s of the card's recovery")
	}
	back := time.Since(clearedAt)
	caughtUp(t, led, &polled, clearedAt)
	lost, gaps, stored := settle(t, led)
	led.mu.Lock()
	ratePre, rateFault := pollRate(polled, beganAt, faultAt), pollRate(polled, faultAt, clearedAt)
	led.mu.Unlock()
	line := fmt.Sprintf("powercut sdcard %s: %d readings delivered during the fault, %.1f s back to durable operation, %d packets lost of %d stored (%d seqs skipped by refused commits); wind-1 polled %.1f times/s before the fault, %.1f during it",
		name, during, back.Seconds(), lost, stored, gaps, ratePre, rateFault)
	t.Log(line)
	fmt.Println(line)
	if !restart && rateFault < ratePre/2 {
		t.Errorf("polling slowed by the card: wind-1 polled %.1f times/s during the fault, %.1f before", rateFault, ratePre)
	}
}

// settle waits up to a minute until every packet reported stored was
// delivered, and returns, as they stood then, how many were not (lost),
// the seqs skipped by refused commits (gaps) and how many were stored.
func settle(t *testing.T, led *ledger) (lost, gaps, stored int) {
	t.Helper()
	var missing []key
	if !led.waitUntil(time.Minute, func() bool {
		missing = storedMissingLocked(led)
		lost, gaps, stored = len(missing), len(led.missingLocked())-len(missing), len(led.stored)
		return lost == 0
	}) {
		t.Errorf("packets stored and never delivered: %v", missing)
	}
	return lost, gaps, stored
}

// storedMissingLocked are the packets reported stored (by -print) and not
// delivered; the ledger's lock is held. A seq that no packet was reported
// stored under is no loss: a commit the card refused took it, and the
// packets went to the volatile buffer.
func storedMissingLocked(led *ledger) []key {
	var out []key
	for _, k := range led.missingLocked() {
		if led.stored[k] != nil {
			out = append(out, k)
		}
	}
	return out
}

// caughtUp waits until a reading taken a second after until is stored:
// appends are stored in order, so every reading before until is in
// *polled by then (a slow card's last commits end after it recovered).
func caughtUp(t *testing.T, led *ledger, polled *[]time.Time, until time.Time) {
	t.Helper()
	after := until.Truncate(time.Second).Add(time.Second)
	if !led.waitUntil(time.Minute, func() bool {
		for _, at := range *polled {
			if !at.Before(after) {
				return true
			}
		}
		return false
	}) {
		t.Errorf("no reading of %s or later stored within a minute", after.Format(time.TimeOnly))
	}
}

// pollRate is how many of the reading times at fall in the whole seconds
// between from and to, per second (reading times are to the second).
func pollRate(at []time.Time, from, to time.Time) float64 {
	lo, hi := from.Truncate(time.Second).Add(time.Second), to.Truncate(time.Second)
	if !hi.After(lo) {
		return 0
	}
	n := 0
	for _, a := range at {
		if !a.Before(lo) && a.Before(hi) {
			n++
		}
	}
	return float64(n) / hi.Sub(lo).Seconds()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
