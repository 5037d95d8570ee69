//go:build powercut

package powercut

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fieldlink/agent"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
)

// TestLossy is the fast level: the field gateway as a process on a
// [LossyFS], cut (SIGKILL, then every write not fsynced dropped) at random
// moments and in the windows that matter, POWERCUT_LOSSY_CUTS times
// (default 200); then the same with the buffer's fsync off
// (POWERCUT_LOSSY_CONTROL_CUTS, default 40), which must lose packets.
func TestLossy(t *testing.T) {
	mosq := testtool.FindMosquitto(t)
	bin := buildGateway(t)
	for _, run := range []struct {
		name    string
		cuts    int
		control bool
	}{
		{"fsync", envInt(t, "POWERCUT_LOSSY_CUTS", 200), false},
		{"control", envInt(t, "POWERCUT_LOSSY_CONTROL_CUTS", 40), true},
	} {
		t.Run(run.name, func(t *testing.T) {
			began := time.Now()
			led := newLedger()
			f := runLossy(t, bin, mosq, led, run.cuts, run.control)
			if run.control {
				f.level = "lossy-control"
			}
			t.Logf("%s, %s", f, time.Since(began).Round(time.Second))
			check(t, f, led, run.control)
		})
	}
}

// cutKinds are the moments a cut aims at: anywhere (random); just after
// the gateway reported a packet stored, while the next poll cycle's commit
// runs (commit); just after the broker took packets, while the gateway
// deletes the acknowledged records, which ride on the next commit (ack);
// during an uplink outage, with packets piled up in the buffer (outage).
var cutKinds = []string{"random", "random", "commit", "commit", "ack", "outage"}

func runLossy(t *testing.T, bin, mosq string, led *ledger, cuts int, control bool) figures {
	rng, seed := seeded(t)
	dir := t.TempDir()
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
	_, emuAddr := emutest.Serve(t, false, siteDevices...)
	broker := testtool.StartMosquitto(t, mosq)
	subscribe(t, broker, led)
	uplink := newLink(t, broker)
	site := siteFile(t, dir, emuAddr, uplink.Addr(), filepath.Join(mnt, "buffer.db"))
	logPath := filepath.Join(dir, "gateway.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := &lockedWriter{w: logf}
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = append([]byte("…"), b[len(b)-20000:]...)
			}
			t.Logf("gateway log (%s):\n%s", logPath, b)
		}
	})
	env := os.Environ()
	if control {
		env = append(env, agent.UnsafeNoSyncEnv+"=1")
	}
	t.Logf("seed %d (POWERCUT_SEED=%d replays the cuts), %d cuts, control %v", seed, seed, cuts, control)

	var salvaged []string
	salvages := 0
	byKind := map[string]int{}
	for i := 1; i <= cuts+1; i++ {
		g := startProcess(t, bin, site, env, led, log, i)
		if i > cuts {
			// The last boot: no cut. Every packet stored must arrive.
			limit := time.Minute
			if control {
				limit = 10 * time.Second // its losses never arrive
			}
			led.waitUntil(limit, func() bool { return g.gone.Load() || g.printed.Load() > 0 && len(led.missingLocked()) == 0 })
			g.stop(t)
		} else {
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
	return led.figures("lossy", cuts, salvages, salvaged)
}

// process is one run of the gateway, from its start to its cut.
type process struct {
	n       int
	cmd     *exec.Cmd
	printed atomic.Int64 // packets it reported stored
	gone    atomic.Bool  // it has exited
	stderr  testtool.SyncBuffer
	exited  chan struct{} // closed once its stdout is drained and it was reaped
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
			g.printed.Add(1)
			led.take(line, false)
		}
		_ = g.cmd.Wait()
		g.gone.Store(true)
		led.poke()
	}()
	return g
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
