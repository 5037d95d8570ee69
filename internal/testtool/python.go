package testtool

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
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
// test's package) with args ("--rtu PTY [--baud N]"; for TCP see
// [StartPymodbusTCP]) and waits for its READY line. It is killed when the
// test ends.
func StartPymodbus(t testing.TB, script string, args ...string) *Pymodbus {
	t.Helper()
	py := RequirePython(t, "pymodbus", "python3-pymodbus")
	if len(args) > 0 && args[0] == "--rtu" {
		RequirePython(t, "serial_asyncio", "python3-serial-asyncio")
	}
	s, err := startPymodbus(t, py, script, args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// StartPymodbusTCP runs the pymodbus server script with --tcp on a
// loopback port of its own ([OnFreshPort]) and returns it with its
// host:port.
func StartPymodbusTCP(t testing.TB, script string, args ...string) (*Pymodbus, string) {
	t.Helper()
	py := RequirePython(t, "pymodbus", "python3-pymodbus")
	var s *Pymodbus
	port := OnFreshPort(t, func(port int) error {
		var err error
		s, err = startPymodbus(t, py, script, append([]string{"--tcp", strconv.Itoa(port)}, args...)...)
		return err
	})
	return s, LoopbackAddr(port)
}

// startPymodbus runs the script and waits for READY; it fails, with
// ErrPortInUse when its stderr says so, if the script exits first.
func startPymodbus(t testing.TB, py, script string, args ...string) (*Pymodbus, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, py, append([]string{script}, args...)...)
	ready := make(chan struct{})
	var stderr SyncBuffer
	cmd.Stdout = &readyWriter{ready: ready}
	cmd.Stderr = io.MultiWriter(testLog{t}, &stderr)
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("testtool: start pymodbus: %w", err)
	}
	s := &Pymodbus{cancel: cancel, exited: make(chan struct{})}
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.Kill)
	what := script + " " + strings.Join(args, " ")
	select {
	case <-ready:
		return s, nil
	case <-s.exited:
		if PortInUse(stderr.String()) {
			return nil, fmt.Errorf("%w: %s", ErrPortInUse, what)
		}
		return nil, fmt.Errorf("testtool: %s exited before READY: %v", what, waitErr)
	case <-time.After(15 * time.Second):
		return nil, fmt.Errorf("testtool: %s not READY within 15s", what)
	}
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
