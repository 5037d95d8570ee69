package modbus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/internal/testtool"
)

// These tests run against pymodbus (testdata/pymodbus_server.py), a Modbus
// implementation nobody here wrote. They skip when it is missing, and fail
// under CI=true.

// pyModel is the register map pymodbus_server.py serves.
func pyModel(slave, fc byte, addr, qty uint16) []byte {
	switch fc {
	case 1, 2:
		out := make([]byte, (int(qty)+7)/8)
		for i := range int(qty) {
			a := int(addr) + i
			if (fc == 1 && a%3 == 0) || (fc == 2 && a%2 == 1) {
				out[i/8] |= 1 << (i % 8)
			}
		}
		return out
	default:
		base := 1000 * uint16(slave)
		if fc == 4 {
			base += 500
		}
		out := make([]byte, 2*int(qty))
		for i := range int(qty) {
			binary.BigEndian.PutUint16(out[2*i:], base+addr+uint16(i))
		}
		return out
	}
}

// pyServer is a running pymodbus_server.py.
type pyServer struct {
	cancel context.CancelFunc
	exited chan struct{} // closed when the process has been reaped
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

// startPymodbus runs the script with args and waits for its READY line.
func startPymodbus(t *testing.T, args ...string) *pyServer {
	t.Helper()
	py := testtool.RequirePython(t, "pymodbus", "python3-pymodbus")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, py, append([]string{"testdata/pymodbus_server.py"}, args...)...)
	ready := make(chan struct{})
	cmd.Stdout = &readyWriter{ready: ready}
	cmd.Stderr = tWriter{t}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start pymodbus: %v", err)
	}
	s := &pyServer{cancel: cancel, exited: make(chan struct{})}
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.kill)
	select {
	case <-ready:
	case <-s.exited:
		t.Fatalf("pymodbus_server.py %s exited before READY: %v", strings.Join(args, " "), waitErr)
	case <-time.After(15 * time.Second):
		t.Fatalf("pymodbus_server.py %s not READY within 15s", strings.Join(args, " "))
	}
	return s
}

// kill kills the server process (SIGKILL), as a device losing power, and
// waits until the kernel has reaped it: until then its listening socket may
// still accept connections.
func (s *pyServer) kill() {
	s.cancel()
	<-s.exited
}

// checkPymodbusReads runs the reads both transports must get right.
func checkPymodbusReads(t *testing.T, c *Client) {
	t.Helper()
	reads := []struct {
		slave, fc byte
		addr, qty uint16
	}{
		{1, 3, 0, 10},
		{2, 3, 90, 10},
		{1, 3, 0, 100},
		{1, 4, 5, 95},
		{2, 4, 0, 1},
		{1, 1, 0, 100},
		{1, 1, 7, 9},
		{2, 2, 3, 17},
		{1, 2, 0, 1},
	}
	for _, r := range reads {
		got, err := c.Read(context.Background(), r.slave, r.fc, r.addr, r.qty)
		if err != nil {
			t.Fatalf("slave %d fc %d addr %d qty %d: %v", r.slave, r.fc, r.addr, r.qty, err)
		}
		if want := pyModel(r.slave, r.fc, r.addr, r.qty); !bytes.Equal(got, want) {
			t.Fatalf("slave %d fc %d addr %d qty %d:\n got % x\nwant % x", r.slave, r.fc, r.addr, r.qty, got, want)
		}
	}
	for _, r := range []struct {
		fc        byte
		addr, qty uint16
	}{{3, 100, 1}, {3, 95, 10}, {4, 1000, 2}, {1, 200, 8}} {
		_, err := c.Read(context.Background(), 1, r.fc, r.addr, r.qty)
		var me *gm.ModbusError
		if !errors.As(err, &me) || me.ExceptionCode != gm.ExceptionCodeIllegalDataAddress {
			t.Fatalf("unmapped fc %d addr %d qty %d: got %v, want exception 2", r.fc, r.addr, r.qty, err)
		}
	}
	if _, err := c.Read(context.Background(), 1, 3, 0, 1); err != nil {
		t.Fatalf("after exceptions: %v", err)
	}
}

func TestPymodbusRTU(t *testing.T) {
	testtool.RequirePython(t, "pymodbus", "python3-pymodbus")
	testtool.RequirePython(t, "serial_asyncio", "python3-serial-asyncio")
	ours, theirs := testtool.PtyPair(t)
	srv := startPymodbus(t, "--rtu", theirs, "--baud", "19200")
	const timeout = 300 * time.Millisecond
	c, err := Open("rtu://"+ours+"?baud=19200", Options{Timeout: timeout, Logger: testtool.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	checkPymodbusReads(t, c)

	// pymodbus ignores slave ids it does not serve, as a bus does.
	if _, err := c.Read(context.Background(), 3, 3, 0, 1); !errors.Is(err, ErrTimeout) {
		t.Fatalf("absent slave 3: got %v, want ErrTimeout", err)
	}
	if _, err := c.Read(context.Background(), 1, 3, 0, 1); err != nil {
		t.Fatalf("after a timeout: %v", err)
	}

	// The device dies; the line stays (socat keeps the pty open).
	srv.kill()
	_, err = c.Read(context.Background(), 1, 3, 0, 1)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("dead device: got %v, want ErrTimeout", err)
	}
	st := c.Stats()
	t.Logf("stats: %+v", st)
	if st.Timeouts != 2 || st.Exceptions != 4 || st.CRCErrors+st.FrameErrors+st.IOErrors != 0 {
		t.Errorf("stats %+v: want 2 timeouts, 4 exceptions and no other errors", st)
	}
}

func TestPymodbusTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := startPymodbus(t, "--tcp", strconv.Itoa(port))
	const timeout = 300 * time.Millisecond
	c, err := Open("tcp://127.0.0.1:"+strconv.Itoa(port), Options{Timeout: timeout, Logger: testtool.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	checkPymodbusReads(t, c)

	// The device dies: the open connection fails (reset or EOF; a timeout
	// at worst), then redialing is refused.
	srv.kill()
	_, err = c.Read(context.Background(), 1, 3, 0, 1)
	if err == nil {
		t.Fatal("read from a killed server succeeded")
	}
	t.Logf("first read after kill: %v", err)
	for _, kind := range []error{ErrCRC, ErrShortFrame, ErrUnexpectedReply} {
		if errors.Is(err, kind) {
			t.Fatalf("first read after kill: %v", err)
		}
	}
	_, err = c.Read(context.Background(), 1, 3, 0, 1)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("second read after kill: got %v, want a refused dial", err)
	}
}
