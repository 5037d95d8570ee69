//go:build powercut

package powercut

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fieldlink/agent"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
)

// TestLossy is the fast level: the field gateway as a process on a
// [LossyFS], cut (SIGKILL, then every write not fsynced dropped) at random
// moments and in the windows that matter, POWERCUT_LOSSY_CUTS times
// (default 200); then cut while its buffer is full and evicting
// (POWERCUT_LOSSY_FULL_CUTS, default 20); then the first run again with
// the buffer's fsync off (POWERCUT_LOSSY_CONTROL_CUTS, default 40), which
// must lose packets.
func TestLossy(t *testing.T) {
	mosq := testtool.FindMosquitto(t)
	bin := buildGateway(t)
	for _, run := range []struct {
		name string
		cuts int
	}{
		{"fsync", envInt(t, "POWERCUT_LOSSY_CUTS", 200)},
		{"full", envInt(t, "POWERCUT_LOSSY_FULL_CUTS", 20)},
		{"control", envInt(t, "POWERCUT_LOSSY_CONTROL_CUTS", 40)},
	} {
		t.Run(run.name, func(t *testing.T) {
			began := time.Now()
			led := newLedger()
			f := runLossy(t, bin, mosq, led, run.cuts, run.name)
			t.Logf("%s, %s", f, time.Since(began).Round(time.Second))
			check(t, f, led, run.name == "control")
		})
	}
}

// cutKinds are the moments a cut aims at: anywhere (random); just after
// the gateway reported a packet stored, while the next poll cycle's commit
// runs (commit); just after the broker took packets, while the gateway
// deletes the acknowledged records, which ride on the next commit (ack);
// during an uplink outage, with packets piled up in the buffer (outage).
var cutKinds = []string{"random", "random", "commit", "commit", "ack", "outage"}

// runLossy cuts the gateway cuts times and boots it once more to deliver
// what it stored. mode is fsync (the real run), full (the real run with a
// buffer kept full) or control (the buffer's fsync off).
func runLossy(t *testing.T, bin, mosq string, led *ledger, cuts int, mode string) figures {
	control, full := mode == "control", mode == "full"
	rng, seed := seeded(t)
	dir := t.TempDir()
	lfs, mnt := mountLossyIn(t, dir)
	_, emuAddr := emutest.Serve(t, false, siteDevices...)
	broker := testtool.StartMosquitto(t, mosq)
	subscribe(t, broker, led)
	uplink := newLink(t, broker)
	site := siteFile(t, dir, emuAddr, uplink.Addr(), filepath.Join(mnt, "buffer.db"), full)
	log := gatewayLog(t, dir)
	env := os.Environ()
	if control {
		env = append(env, agent.UnsafeNoSyncEnv+"=1")
	}
	t.Logf("seed %d (POWERCUT_SEED=%d replays the cuts), %d cuts, %s", seed, seed, cuts, mode)

	var salvaged []string
	salvages := 0
	byKind := map[string]int{}
	var fullTotal int64 // bytes of packets stored by the boots of a full run
	for i := 1; i <= cuts+1; i++ {
		if full && i <= cuts {
			uplink.set(false) // an outage for the whole boot: the buffer fills and evicts
		}
		g := startProcess(t, bin, site, env, led, log, i)
		switch {
		case i > cuts && full:
			// The last boot: no cut, the uplink back. Oldest first, the
			// backlog goes before the boot's own packets; the rest of what
			// is missing was evicted, or is still in the buffer.
			led.waitUntil(time.Minute, func() bool { return g.gone.Load() || g.printed.Load() > 0 && g.allReceivedLocked(led) })
			g.stop(t)
		case i > cuts:
			// The last boot: no cut. Every packet stored must arrive.
			limit := time.Minute
			if control {
				limit = 10 * time.Second // its losses never arrive
			}
			delivered := led.waitUntil(limit, func() bool { return g.gone.Load() || g.printed.Load() > 0 && len(led.missingLocked()) == 0 })
			if !delivered && !control {
				t.Errorf("the last boot did not deliver every packet stored within %v; missing: %v", limit, led.missing()[:min(len(led.missing()), 10)])
			}
			g.stop(t)
		case full:
			// The uplink is down at every boot, so the buffer stays full
			// once filled: the first boot runs until past full, the
			// others a moment (2–24 KiB of packets), while the buffer
			// evicts its oldest records at every commit.
			limit := int64(2<<10 + rng.IntN(22<<10))
			if fullTotal < fullBytes*6/5 {
				limit = fullBytes*6/5 - fullTotal + limit
			}
			byKind["full"]++
			if !led.waitUntil(30*time.Second, func() bool { return g.gone.Load() || g.bytes.Load() >= limit }) || g.gone.Load() {
				t.Fatalf("cut %d (full): the gateway exited by itself, or stored no %d bytes within 30s; its stderr:\n%s", i, limit, g.stderr.String())
			}
			g.kill(t)
			uplink.set(true)
			fullTotal += g.bytes.Load()
		default:
			kind := cutKinds[rng.IntN(len(cutKinds))]
			byKind[kind]++
			var ok bool
			switch kind {
			case "random":
				ok = led.waitUntil(30*time.Second, func() bool { return g.gone.Load() || g.printed.Load() > 0 })
				time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // the cut's moment, not a synchronisation
			case "commit":
				k := int64(1 + rng.IntN(6))
				ok = led.waitUntil(30*time.Second, func() bool { return g.gone.Load() || g.printed.Load() >= k })
			case "ack":
				base, k := led.receivedCount(), 1+rng.IntN(6)
				ok = led.waitUntil(30*time.Second, func() bool { return g.gone.Load() || led.received >= base+k })
			case "outage":
				uplink.set(false)
				k := int64(5 + rng.IntN(30))
				ok = led.waitUntil(30*time.Second, func() bool { return g.gone.Load() || g.printed.Load() >= k })
			}
			if !ok || g.gone.Load() {
				t.Fatalf("cut %d (%s): the gateway exited by itself, or stored or delivered nothing within 30s; its stderr:\n%s", i, kind, g.stderr.String())
			}
			g.kill(t)
			uplink.set(true)
		}
		if s := g.stderr.String(); strings.Contains(s, salvageMark) {
			salvages++
			for _, l := range strings.Split(s, "\n") {
				if strings.Contains(l, salvageMark) || strings.Contains(l, salvageDone) {
					salvaged = append(salvaged, fmt.Sprintf("boot %d: %s", i, l))
				}
			}
		}
		if i <= cuts {
			if _, err := lfs.Cut(); err != nil {
				t.Fatalf("cut %d: %v", i, err)
			}
		}
	}
	t.Logf("cuts by kind %v; %d fsyncs served", byKind, lfs.Fsyncs())
	f := led.figures("lossy-"+mode, cuts, salvages, salvaged)
	if mode == "fsync" {
		f.level = "lossy"
	}
	if !full {
		// Stopping the last boot stores the pollers' last readings after
		// the uplink's last send: they wait in the buffer for the next
		// start, and are not lost.
		left, _ := leftInBuffer(t, bin, site)
		f.left, f.lost = len(left), 0
		for _, k := range led.missing() {
			if !left[k] {
				f.lost++
			}
		}
	}
	if full {
		// What is missing must have been evicted, or be in the buffer
		// still: the buffer counts its evictions in the file, committed
		// with them.
		left, stats := leftInBuffer(t, bin, site)
		evicted, err := strconv.Atoi(stats["evicted (max_bytes)"])
		if err != nil {
			t.Fatalf("gateway buffer stats: evicted (max_bytes) = %q: %v", stats["evicted (max_bytes)"], err)
		}
		missing := 0
		for _, k := range led.missing() {
			if !left[k] {
				missing++
			}
		}
		f.evicted, f.left = evicted, len(left)
		f.lost = max(0, missing-evicted)
		t.Logf("full: %d missing, %d left in the buffer, %d evicted (max_bytes) by the buffer's count", missing, len(left), evicted)
		if evicted == 0 {
			t.Errorf("the buffer evicted nothing: the full run did not fill it")
		}
	}
	return f
}

// mountLossyIn mounts a [LossyFS] on dir/power until the test ends, or
// skips the test where FUSE is missing (fails it in CI).
func mountLossyIn(t *testing.T, dir string) (*LossyFS, string) {
	t.Helper()
	mnt := filepath.Join(dir, "power")
	if err := os.Mkdir(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testtool.Unsupported(t, "/dev/fuse: the lossy filesystem is a FUSE filesystem")
	}
	testtool.Require(t, "fusermount3", "fuse3")
	lfs, err := MountLossy(mnt)
	if err != nil {
		testtool.Unsupported(t, err.Error())
	}
	t.Cleanup(func() {
		if err := lfs.Close(); err != nil {
			t.Error(err)
		}
	})
	return lfs, mnt
}

// gatewayLog is dir/gateway.log, where the boots' stderr goes; its tail
// is shown when the test fails.
func gatewayLog(t *testing.T, dir string) *lockedWriter {
	t.Helper()
	logPath := filepath.Join(dir, "gateway.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("gateway log (%s):\n%s", logPath, tail(string(b), 20000))
		}
	})
	return &lockedWriter{w: logf}
}

// leftInBuffer is what the stopped gateway's buffer holds (gateway buffer
// export) and its figures (gateway buffer stats, by name).
func leftInBuffer(t *testing.T, bin, site string) (map[key]bool, map[string]string) {
	t.Helper()
	out, err := exec.Command(bin, "buffer", "export", "-c", site).Output()
	if err != nil {
		t.Fatalf("gateway buffer export: %v", err)
	}
	left := map[key]bool{}
	for line := range strings.Lines(string(out)) {
		p, err := packet.Decode([]byte(line))
		if err != nil {
			t.Fatalf("gateway buffer export: %v: %.200s", err, line)
		}
		left[key{p.Epoch, p.Seq}] = true
	}
	out, err = exec.Command(bin, "buffer", "stats", "-c", site).Output()
	if err != nil {
		t.Fatalf("gateway buffer stats: %v", err)
	}
	stats := map[string]string{}
	for line := range strings.Lines(string(out)) {
		// "name  value": the name may hold single spaces, the gap is two.
		if name, value, ok := strings.Cut(strings.TrimSpace(line), "  "); ok {
			stats[name] = strings.TrimSpace(value)
		}
	}
	return left, stats
}

// process is one run of the gateway, from its start to its cut.
type process struct {
	n       int
	cmd     *exec.Cmd
	printed atomic.Int64 // packets it reported stored
	bytes   atomic.Int64 // their bytes
	gone    atomic.Bool  // it has exited

	mu     sync.Mutex
	keys   []key // the packets it reported stored
	stderr testtool.SyncBuffer
	exited chan struct{} // closed once its stdout is drained and it was reaped
}

// startProcess runs `gateway run -print` on site; its stored packets go to
// led, its stderr to log and to its own buffer.
func startProcess(t *testing.T, bin, site string, env []string, led *ledger, log io.Writer, n int) *process {
	t.Helper()
	g := &process{n: n, exited: make(chan struct{})}
	g.cmd = exec.Command(bin, "run", "-c", site, "-print", "-log-level", "warn", "-log-format", "text")
	g.cmd.Env = env
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(log, "=== boot %d at %s\n", n, time.Now().Format("15:04:05.000"))
	g.cmd.Stderr = io.MultiWriter(log, &g.stderr)
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start the gateway: %v", err)
	}
	go func() {
		defer close(g.exited)
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				break // a line cut short by the kill was never reported whole
			}
			if k, ok := led.take(line, false); ok {
				g.mu.Lock()
				g.keys = append(g.keys, k)
				g.mu.Unlock()
			}
			g.bytes.Add(int64(len(line)))
			g.printed.Add(1)
		}
		_ = g.cmd.Wait()
		g.gone.Store(true)
		led.poke()
	}()
	return g
}

// allReceivedLocked reports whether the broker delivered every packet this
// process reported stored; the ledger's lock is held.
func (g *process) allReceivedLocked(led *ledger) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range g.keys {
		if len(led.recv[k]) == 0 {
			return false
		}
	}
	return true
}

// kill is the cut: SIGKILL, then wait until the process is reaped (its
// files closed).
func (g *process) kill(t *testing.T) {
	t.Helper()
	_ = g.cmd.Process.Kill()
	g.wait(t)
}

// stop ends the last boot cleanly (SIGTERM), or kills it after 20 s.
func (g *process) stop(t *testing.T) {
	t.Helper()
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("the gateway did not stop within 20s of SIGTERM; killed")
		g.kill(t)
	}
}

func (g *process) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("gateway boot %d did not exit within 20s of its SIGKILL", g.n)
	}
}

// lockedWriter serialises the writes of several processes' stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
