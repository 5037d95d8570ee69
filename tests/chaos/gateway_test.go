package chaos

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// gatewayID is the chaos site's gateway id.
const gatewayID = "gw-chaos"

// restartDelay is how long the supervisor waits before it restarts a
// gateway that exited by itself, as systemd's RestartSec would.
const restartDelay = time.Second

// gateway supervises `gateway run` as a real process: it starts it, kills
// it with SIGKILL and restarts it on request, restarts it when it exits by
// itself (and records that), and stops it with SIGTERM at the end.
type gateway struct {
	t    *testing.T
	bin  string
	site string
	led  *ledger
	log  *lockedFile // every instance's stderr, in order

	kills chan killReq
	stopc chan chan error
	done  chan struct{}

	enospc atomic.Int64 // stderr writes that mention ENOSPC, over every instance
	// full is the stderr writes that say the buffer went on in memory
	// because the card (the tmpfs) is full, over every instance.
	full atomic.Int64

	mu         sync.Mutex
	instances  int
	unexpected []string // exits nobody asked for
	races      int
}

type killReq struct {
	down  time.Duration
	reply chan time.Time // the kill's moment; closed without a value if none
}

// instance is one process of the gateway.
type instance struct {
	n      int
	cmd    *exec.Cmd
	up     chan struct{} // closed at its first line on stdout
	exited chan struct{} // closed once its stdout is drained and it was reaped
	err    error
	tail   *tailBuffer
}

func startGateway(t *testing.T, bin, site, logPath string, led *ledger) *gateway {
	t.Helper()
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{t: t, bin: bin, site: site, led: led, log: &lockedFile{f: lf},
		kills: make(chan killReq), stopc: make(chan chan error), done: make(chan struct{})}
	first, err := g.start()
	if err != nil {
		t.Fatal(err)
	}
	go g.supervise(first)
	t.Cleanup(func() {
		_ = g.stop()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = append([]byte("…"), b[len(b)-20000:]...)
			}
			t.Logf("gateway log (%s):\n%s", logPath, b)
		}
	})
	return g
}

// start runs one instance of the gateway.
func (g *gateway) start() (*instance, error) {
	g.mu.Lock()
	g.instances++
	n := g.instances
	g.mu.Unlock()
	cmd := exec.Command(g.bin, "run", "-c", g.site, "-print", "-log-level", "warn", "-log-format", "text")
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	in := &instance{n: n, cmd: cmd, up: make(chan struct{}), exited: make(chan struct{}), tail: &tailBuffer{max: 8 << 10}}
	fmt.Fprintf(g.log, "=== gateway instance %d started at %s\n", n, time.Now().Format("15:04:05.000"))
	cmd.Stderr = io.MultiWriter(g.log, in.tail, enospcCounter{&g.enospc}, fullCounter{&g.full})
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	go func() {
		defer close(in.exited)
		r := bufio.NewReaderSize(stdout, 64<<10)
		var once sync.Once
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				// A line cut by a kill -9 was never printed whole: the
				// packet is not counted as produced.
				break
			}
			once.Do(func() { close(in.up) })
			g.led.stored(line, n, time.Now())
		}
		in.err = cmd.Wait()
		if strings.Contains(in.tail.String(), "WARNING: DATA RACE") {
			g.mu.Lock()
			g.races++
			g.mu.Unlock()
		}
	}()
	return in, nil
}

// supervise owns the running instance until stop.
func (g *gateway) supervise(cur *instance) {
	defer close(g.done)
	var (
		reply   chan time.Time // a kill waiting for the restart
		replyAt time.Time
	)
	for {
		select {
		case <-cur.exited:
			g.mu.Lock()
			g.unexpected = append(g.unexpected, fmt.Sprintf("gateway instance %d exited by itself at %s: %v; its last words:\n%s",
				cur.n, time.Now().Format("15:04:05.000"), cur.err, cur.tail.String()))
			g.mu.Unlock()
			time.Sleep(restartDelay)
		case req := <-g.kills:
			_ = cur.cmd.Process.Signal(syscall.SIGKILL)
			at := time.Now()
			<-cur.exited
			if ee, ok := cur.err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				g.mu.Lock()
				g.unexpected = append(g.unexpected, fmt.Sprintf("gateway instance %d exited by itself before its kill -9: %v; its last words:\n%s",
					cur.n, cur.err, cur.tail.String()))
				g.mu.Unlock()
			}
			fmt.Fprintf(g.log, "=== gateway instance %d killed (SIGKILL) at %s; down for %v\n", cur.n, at.Format("15:04:05.000"), req.down)
			time.Sleep(req.down)
			replyAt, reply = at, req.reply
		case stopped := <-g.stopc:
			stopped <- g.terminate(cur)
			return
		}
		next, err := g.start()
		for err != nil {
			g.mu.Lock()
			g.unexpected = append(g.unexpected, "restart failed: "+err.Error())
			g.mu.Unlock()
			time.Sleep(restartDelay)
			next, err = g.start()
		}
		cur = next
		if reply != nil {
			// The kill is over once the new process runs: a SIGTERM
			// before main handles it kills the process as SIGKILL does.
			cur.waitRunning(30 * time.Second)
			reply <- replyAt
			reply = nil
		}
	}
}

// waitRunning waits until the process printed its first packet (so it
// runs cmdRun, and handles SIGTERM), or exited, or limit passed.
func (in *instance) waitRunning(limit time.Duration) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-in.up:
	case <-in.exited:
	case <-t.C:
	}
}

// terminate stops cur with SIGTERM, as systemd does, and waits for it.
func (g *gateway) terminate(cur *instance) error {
	select {
	case <-cur.exited:
		return fmt.Errorf("gateway instance %d had exited already: %v", cur.n, cur.err)
	default:
	}
	cur.waitRunning(30 * time.Second)
	_ = cur.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cur.exited:
		if cur.err != nil {
			return fmt.Errorf("gateway instance %d: SIGTERM: %v; its last words:\n%s", cur.n, cur.err, cur.tail.String())
		}
		return nil
	case <-time.After(60 * time.Second):
		_ = cur.cmd.Process.Signal(syscall.SIGQUIT) // goroutine dump into the log
		select {
		case <-cur.exited:
		case <-time.After(5 * time.Second):
			_ = cur.cmd.Process.Kill()
			<-cur.exited
		}
		return fmt.Errorf("gateway instance %d did not stop within 60s of SIGTERM (a hang; goroutine dump in the gateway log)", cur.n)
	}
}

// kill9 kills the running gateway with SIGKILL, keeps it dead for down,
// restarts it, and returns the kill's moment.
func (g *gateway) kill9(down time.Duration) (time.Time, bool) {
	req := killReq{down: down, reply: make(chan time.Time, 1)}
	select {
	case g.kills <- req:
	case <-g.done:
		return time.Time{}, false
	}
	at, ok := <-req.reply
	return at, ok
}

// stop terminates the gateway for good; later calls return nil.
func (g *gateway) stop() error {
	reply := make(chan error, 1)
	select {
	case g.stopc <- reply:
		return <-reply
	case <-g.done:
		return nil
	}
}

func (g *gateway) report() (instances int, unexpected []string, races int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.instances, append([]string(nil), g.unexpected...), g.races
}

// lockedFile is a file written from several goroutines.
type lockedFile struct {
	mu sync.Mutex
	f  *os.File
}

func (l *lockedFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
	all bytes.Buffer // only "DATA RACE" matters beyond the tail: kept in full
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	if bytes.Contains(p, []byte("DATA RACE")) {
		t.all.WriteString("WARNING: DATA RACE\n")
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.all.String() + string(t.b)
}

// gatewayCmd runs a one-shot gateway subcommand (check, buffer export,
// buffer stats) and returns its stdout.
func gatewayCmd(bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("gateway %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return out, err
	}
	return out, nil
}

// current is the number of the instance started last.
func (g *gateway) current() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.instances
}

// fullCounter counts the writes that say the buffer is not durable
// because the card is full (buffer/cardstore): each is one log line.
type fullCounter struct{ n *atomic.Int64 }

func (c fullCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("buffer not durable: the card is full")) {
		c.n.Add(1)
	}
	return len(p), nil
}

// enospcCounter counts the writes that mention ENOSPC: the gateway logs
// each line in one write.
type enospcCounter struct{ n *atomic.Int64 }

func (c enospcCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(syscall.ENOSPC.Error())) {
		c.n.Add(1)
	}
	return len(p), nil
}
