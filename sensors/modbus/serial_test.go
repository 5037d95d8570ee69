package modbus

import (
	"errors"
	"fieldlink/internal/testtool"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.bug.st/serial"
)

// fakeUSBSerial lays out a fake /dev and /sys for a USB serial adapter named
// tty with the given latency_timer content ("" for none), and returns the
// sysfs root and a /dev/serial/by-id style symlink to the device.
func fakeUSBSerial(t *testing.T, tty, latency string) (sysRoot, byID string) {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "dev", tty)
	byID = filepath.Join(root, "dev", "serial", "by-id", "usb-FTDI_FT232R_USB_UART_A1B2C3-if00-port0")
	sysRoot = filepath.Join(root, "sys")
	for _, d := range []string{filepath.Dir(byID), filepath.Join(sysRoot, "bus", "usb-serial", "devices", tty)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(dev, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", tty), byID); err != nil {
		t.Fatal(err)
	}
	if latency != "" {
		if err := os.WriteFile(latencyFile(sysRoot, tty), []byte(latency), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return sysRoot, byID
}

func latencyFile(sysRoot, tty string) string {
	return filepath.Join(sysRoot, "bus", "usb-serial", "devices", tty, "latency_timer")
}

func TestTuneLatencyTimer(t *testing.T) {
	tests := []struct {
		name    string
		latency string // initial file content, "" for no file
		want    string // file content afterwards
		wantLog string
	}{
		{name: "ftdi_default", latency: "16\n", want: "1\n", wantLog: `level=INFO msg="FTDI latency timer 16ms -> 1ms"`},
		{name: "already_low", latency: "1\n", want: "1\n", wantLog: "level=DEBUG msg=\"modbus: latency timer already low\""},
		{name: "zero", latency: "0\n", want: "0\n", wantLog: "already low"},
		{name: "not_usb_serial", wantLog: "not a USB serial adapter"},
		{name: "junk", latency: "fast\n", want: "fast\n", wantLog: "latency timer unreadable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sysRoot, byID := fakeUSBSerial(t, "ttyUSB0", tt.latency)
			var logs testtool.SyncBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			tuneLatencyTimer(log, sysRoot, byID)
			if tt.latency != "" {
				b, err := os.ReadFile(latencyFile(sysRoot, "ttyUSB0"))
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != tt.want {
					t.Errorf("latency_timer = %q, want %q", b, tt.want)
				}
			}
			if !strings.Contains(logs.String(), tt.wantLog) {
				t.Errorf("log %q does not contain %q", logs.String(), tt.wantLog)
			}
		})
	}
}

func TestTuneLatencyTimerNotWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can write a read-only file")
	}
	sysRoot, byID := fakeUSBSerial(t, "ttyUSB1", "16\n")
	if err := os.Chmod(latencyFile(sysRoot, "ttyUSB1"), 0o444); err != nil {
		t.Fatal(err)
	}
	var logs testtool.SyncBuffer
	tuneLatencyTimer(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), sysRoot, byID)
	if !strings.Contains(logs.String(), "level=DEBUG") || !strings.Contains(logs.String(), "cannot lower latency timer") {
		t.Errorf("log %q, want a debug line saying why", logs.String())
	}
}

func TestTuneLatencyTimerBrokenSymlink(t *testing.T) {
	var logs testtool.SyncBuffer
	tuneLatencyTimer(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		t.TempDir(), filepath.Join(t.TempDir(), "missing"))
	if !strings.Contains(logs.String(), "cannot resolve port") {
		t.Errorf("log %q", logs.String())
	}
}

// fakePort mimics go.bug.st/serial's Read: it waits up to the read timeout
// for data and returns (0, nil) when none came.
type fakePort struct {
	serial.Port // not implemented; calling anything else panics
	data        chan []byte
	timeout     time.Duration
	reads       chan struct{} // when not nil, gets a token per Read
}

func (p *fakePort) SetReadTimeout(d time.Duration) error { p.timeout = d; return nil }

func (p *fakePort) Read(b []byte) (int, error) {
	if p.reads != nil {
		select {
		case p.reads <- struct{}{}:
		default:
		}
	}
	select {
	case d := <-p.data:
		return copy(b, d), nil
	case <-time.After(p.timeout):
		return 0, nil
	}
}

func TestSerialLinkDeadlines(t *testing.T) {
	port := &fakePort{data: make(chan []byte, 1)}
	link := &serialLink{port: port}
	buf := make([]byte, 8)

	port.data <- []byte{1, 2, 3}
	if n, err := link.Read(buf); n != 3 || err != nil {
		t.Fatalf("Read = %d, %v; want 3 bytes", n, err)
	}

	// The port's (0, nil) on timeout must become a deadline error, or
	// io.ReadFull would spin forever.
	link.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	if _, err := io.ReadFull(link, buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("ReadFull past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d < 25*time.Millisecond {
		t.Fatalf("deadline of 30ms ended the read after %v", d)
	}

	// A deadline moved from another goroutine (a canceled ctx) ends a
	// blocked Read that had none.
	link.SetReadDeadline(time.Time{})
	port.reads = make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := link.Read(buf)
		done <- err
	}()
	<-port.reads // the Read waits on the port
	link.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(hangMargin):
		t.Fatal("a blocked Read ignored SetReadDeadline from another goroutine")
	}
}
