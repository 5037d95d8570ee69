package testtool

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Pymodbus is the Modbus slave of sensors/modbus/testdata/pymodbus_server.py,
// a Modbus implementation nobody here wrote, run by the system python.
type Pymodbus struct {
	cancel context.CancelFunc
	exited chan struct{} // closed when the process has been reaped
}

// StartPymodbus runs the pymodbus server script (at script, relative to the
// test's package) with args ("--tcp PORT" or "--rtu PTY [--baud N]") and
// waits for its READY line. It is killed when the test ends.
func StartPymodbus(t testing.TB, script string, args ...string) *Pymodbus {
	t.Helper()
	py := RequirePython(t, "pymodbus", "python3-pymodbus")
	if len(args) > 0 && args[0] == "--rtu" {
		RequirePython(t, "serial_asyncio", "python3-serial-asyncio")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, py, append([]string{script}, args...)...)
	ready := make(chan struct{})
	cmd.Stdout = &readyWriter{ready: ready}
	cmd.Stderr = testLog{t}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start pymodbus: %v", err)
	}
	s := &Pymodbus{cancel: cancel, exited: make(chan struct{})}
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.Kill)
	select {
	case <-ready:
	case <-s.exited:
		t.Fatalf("%s %s exited before READY: %v", script, strings.Join(args, " "), waitErr)
	case <-time.After(15 * time.Second):
		t.Fatalf("%s %s not READY within 15s", script, strings.Join(args, " "))
	}
	return s
}

// Kill kills the server process (SIGKILL), as a device losing power, and
// waits until the kernel has reaped it: until then its listening socket may
// still accept connections.
func (s *Pymodbus) Kill() {
	s.cancel()
	<-s.exited
}

// readyWriter closes ready when the line READY has been written to it.
type readyWriter struct {
	mu    sync.Mutex
	buf   []byte
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if w.ready != nil && bytes.Contains(w.buf, []byte("READY\n")) {
		close(w.ready)
		w.ready = nil
	}
	return len(p), nil
}

// testLog writes a child process's output into the test's own output.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
