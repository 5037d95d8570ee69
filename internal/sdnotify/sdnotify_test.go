package sdnotify_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/sdnotify"
)

// listen binds a unixgram socket the way systemd does, points
// $NOTIFY_SOCKET at it, and returns it. name "" means a path in
// t.TempDir(); a name starting with '@' is an abstract socket.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	if name == "" {
		name = filepath.Join(t.TempDir(), "notify.sock")
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv(sdnotify.EnvSocket, name)
	return c
}

// recv reads one datagram, failing the test after a generous timeout.
func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestSend(t *testing.T) {
	tests := []struct {
		name string
		send func() error
		want string
	}{
		{"Ready", sdnotify.Ready, "READY=1"},
		{"Stopping", sdnotify.Stopping, "STOPPING=1"},
		{"Watchdog", sdnotify.Watchdog, "WATCHDOG=1"},
		{"Notify", func() error { return sdnotify.Notify("STATUS=polling 6 devices\nREADY=1") }, "STATUS=polling 6 devices\nREADY=1"},
	}
	for _, socket := range []string{"path", "abstract"} {
		for _, tt := range tests {
			t.Run(socket+"/"+tt.name, func(t *testing.T) {
				name := ""
				if socket == "abstract" {
					name = fmt.Sprintf("@fieldlink-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
				}
				c := listen(t, name)
				if err := tt.send(); err != nil {
					t.Fatalf("send: %v", err)
				}
				if got := recv(t, c); got != tt.want {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			})
		}
	}
}

func TestNoSocketIsNoOp(t *testing.T) {
	t.Setenv(sdnotify.EnvSocket, "")
	for _, f := range []func() error{sdnotify.Ready, sdnotify.Stopping, sdnotify.Watchdog} {
		if err := f(); err != nil {
			t.Errorf("with %s unset: %v, want nil", sdnotify.EnvSocket, err)
		}
	}
}

func TestSendErrors(t *testing.T) {
	tests := []struct{ name, socket, want string }{
		{"relative", "notify.sock", "not a path or an abstract socket name"},
		{"vsock", "vsock:2:1234", "not a path or an abstract socket name"},
		{"nobody listening", filepath.Join(t.TempDir(), "gone.sock"), "sdnotify: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(sdnotify.EnvSocket, tt.socket)
			err := sdnotify.Ready()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Ready() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestWatchdogInterval(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	tests := []struct {
		name, usec, pid string
		want            time.Duration
		ok              bool
	}{
		{"unset", "", "", 0, false},
		{"60s", "60000000", "", 60 * time.Second, true},
		{"this pid", "30000000", me, 30 * time.Second, true},
		{"other pid", "30000000", "1", 0, false},
		{"bad pid", "30000000", "x", 0, false},
		{"zero", "0", "", 0, false},
		{"negative", "-5", "", 0, false},
		{"garbage", "60s", "", 0, false},
		{"overflow", "99999999999999999999", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(sdnotify.EnvWatchdogUsec, tt.usec)
			t.Setenv(sdnotify.EnvWatchdogPID, tt.pid)
			got, ok := sdnotify.WatchdogInterval()
			if got != tt.want || ok != tt.ok {
				t.Errorf("WatchdogInterval() = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// runWatchdog starts RunWatchdog and returns a function that stops it and
// fails the test if it does not return.
func runWatchdog(t *testing.T, healthy func() bool) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sdnotify.RunWatchdog(ctx, healthy)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("RunWatchdog did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestRunWatchdogFeedsWhileHealthy(t *testing.T) {
	c := listen(t, "")
	t.Setenv(sdnotify.EnvWatchdogUsec, "20000") // 20ms: a feed every 10ms
	t.Setenv(sdnotify.EnvWatchdogPID, strconv.Itoa(os.Getpid()))
	stop := runWatchdog(t, nil)
	for range 3 {
		if got := recv(t, c); got != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1", got)
		}
	}
	stop()
}

func TestRunWatchdogStarvesWhileUnhealthy(t *testing.T) {
	c := listen(t, "")
	t.Setenv(sdnotify.EnvWatchdogUsec, "20000")
	// Unhealthy for the first three checks (a wedged gateway), then healthy.
	var checks atomic.Int32
	healthy := func() bool { return checks.Add(1) > 3 }
	runWatchdog(t, healthy)
	if got := recv(t, c); got != "WATCHDOG=1" {
		t.Fatalf("got %q, want WATCHDOG=1", got)
	}
	if n := checks.Load(); n < 4 {
		t.Errorf("fed the watchdog after %d health checks, the first three of them failing", n)
	}
}

func TestRunWatchdogReturnsWithoutWatchdog(t *testing.T) {
	tests := []struct{ name, socket, usec string }{
		{"no WATCHDOG_USEC", "/run/systemd/notify", ""},
		{"no NOTIFY_SOCKET", "", "20000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(sdnotify.EnvSocket, tt.socket)
			t.Setenv(sdnotify.EnvWatchdogUsec, tt.usec)
			done := make(chan struct{})
			go func() {
				defer close(done)
				sdnotify.RunWatchdog(context.Background(), func() bool {
					t.Error("healthy called without a watchdog")
					return true
				})
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("RunWatchdog did not return at once without a watchdog")
			}
		})
	}
}
