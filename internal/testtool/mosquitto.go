package testtool

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// FindMosquitto returns the mosquitto binary: in PATH, or where Debian
// installs it (/usr/sbin, often not in PATH). Missing, it skips the test,
// or fails it under CI=true.
func FindMosquitto(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	Missing(t, "mosquitto", "mosquitto")
	return ""
}

// StartMosquitto runs the mosquitto at bin on a free loopback port until the
// test ends and returns its host:port. The broker is anonymous, keeps nothing
// on disk and queues without limit (test subscribers take every QoS 1
// message). extraConf lines are appended to its configuration.
func StartMosquitto(t testing.TB, bin string, extraConf ...string) string {
	t.Helper()
	dir := t.TempDir()
	var log lockedBuffer
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		var c strings.Builder
		fmt.Fprintf(&c, "listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n", port)
		c.WriteString("max_queued_messages 0\nmax_inflight_messages 100\n")
		c.WriteString("log_dest stderr\nlog_type error\nlog_type warning\n")
		if os.Geteuid() == 0 {
			c.WriteString("user root\n") // else it drops to "mosquitto", who cannot read t.TempDir()
		}
		for _, l := range extraConf {
			c.WriteString(l + "\n")
		}
		conf := filepath.Join(dir, "mosquitto.conf")
		if err := os.WriteFile(conf, []byte(c.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", conf)
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start mosquitto: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		if listening(addr, exited) {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("mosquitto %s log:\n%s", addr, log.String())
				}
			})
			return addr
		}
		stop()
		// Another process may have taken the port meanwhile.
		if attempt == 5 {
			t.Fatalf("mosquitto did not start on a free port:\n%s", log.String())
		}
	}
}

// listening waits until addr accepts connections, or the process behind it
// exits.
func listening(addr string, exited <-chan struct{}) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			nc.Close()
			select {
			case <-exited: // someone else owns the port
				return false
			case <-time.After(50 * time.Millisecond):
				return true
			}
		}
		select {
		case <-exited:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return false
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
