package testtool

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sbinDirs are where Debian installs daemons and admin tools: often not in
// PATH for a user.
var sbinDirs = []string{"/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"}

// LookSbin finds binary in PATH, then in the sbin directories.
func LookSbin(binary string) (string, error) {
	if p, err := exec.LookPath(binary); err == nil {
		return p, nil
	}
	for _, dir := range sbinDirs {
		p := filepath.Join(dir, binary)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or %s", binary, strings.Join(sbinDirs, ", "))
}

// RequireSbin is Require for a binary that may live in an sbin directory.
func RequireSbin(t testing.TB, binary, pkg string) string {
	t.Helper()
	p, err := LookSbin(binary)
	if err != nil {
		Missing(t, binary, pkg)
	}
	return p
}

// FindMosquitto returns the mosquitto binary, or skips the test (fails it
// under CI).
func FindMosquitto(t testing.TB) string {
	t.Helper()
	return RequireSbin(t, "mosquitto", "mosquitto")
}

// MosquittoConfig is the configuration of an anonymous broker on
// 127.0.0.1:port that keeps nothing on disk and queues without limit (test
// subscribers take every QoS 1 message); extra lines are appended, and a
// later line overrides an earlier one (e.g. "allow_anonymous false").
func MosquittoConfig(port int, extra ...string) string {
	var c strings.Builder
	fmt.Fprintf(&c, "listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n", port)
	c.WriteString("max_queued_messages 0\nmax_inflight_messages 100\n")
	c.WriteString("log_dest stderr\nlog_type error\nlog_type warning\n")
	if os.Geteuid() == 0 {
		c.WriteString("user root\n") // else it drops to "mosquitto", who cannot read a temporary directory
	}
	for _, l := range extra {
		c.WriteString(l + "\n")
	}
	return c.String()
}

// Mosquitto is a mosquitto process on a loopback port that the test owns:
// Kill and Start stop it and run it again on the same port, for tests of
// a broker that goes away. It is killed when the test ends, and its log
// is printed if the test failed.
type Mosquitto struct {
	t    testing.TB
	bin  string
	conf string
	port int
	log  SyncBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// NewMosquitto runs the mosquitto at bin (FindMosquitto) on a loopback
// port of its own ([OnFreshPort]), configured by MosquittoConfig(port, extraConf...), until the test
// ends.
func NewMosquitto(t testing.TB, bin string, extraConf ...string) *Mosquitto {
	t.Helper()
	m := &Mosquitto{t: t, bin: bin, conf: filepath.Join(t.TempDir(), "mosquitto.conf")}
	t.Cleanup(func() {
		m.Kill()
		if t.Failed() {
			t.Logf("mosquitto %s log:\n%s", m.Addr(), m.log.String())
		}
	})
	m.port = OnFreshPort(t, func(port int) error {
		m.port = port
		if err := os.WriteFile(m.conf, []byte(MosquittoConfig(port, extraConf...)), 0o600); err != nil {
			return fmt.Errorf("testtool: %w", err)
		}
		return m.tryStart()
	})
	return m
}

// StartMosquitto is NewMosquitto for a test that needs only the address.
func StartMosquitto(t testing.TB, bin string, extraConf ...string) string {
	t.Helper()
	return NewMosquitto(t, bin, extraConf...).Addr()
}

// Addr is the broker's host:port.
func (m *Mosquitto) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }

// URL is the broker's mqtt:// URL.
func (m *Mosquitto) URL() string { return "mqtt://" + m.Addr() }

// Log is what the broker wrote so far.
func (m *Mosquitto) Log() string { return m.log.String() }

// Start runs the broker again on its port, after Kill; while the port is
// still taken (by the killed broker's last moments, say) it waits for it.
func (m *Mosquitto) Start() {
	m.t.Helper()
	OnSamePort(m.t, m.port, func(int) error { return m.tryStart() })
}

// Kill stops the broker with SIGKILL (no clean close) and waits for it to
// exit; it does nothing when the broker is not running.
func (m *Mosquitto) Kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.cmd, m.exited = nil, nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// tryStart runs mosquitto and waits until its port accepts connections; it
// fails, with ErrPortInUse when the log says so, if mosquitto exits first.
func (m *Mosquitto) tryStart() error {
	mark := m.log.Len()
	cmd := exec.Command(m.bin, "-c", m.conf)
	cmd.Stdout, cmd.Stderr = &m.log, &m.log
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testtool: start mosquitto: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.mu.Lock()
	m.cmd, m.exited = cmd, exited
	m.mu.Unlock()
	if listening(m.Addr(), exited) {
		return nil
	}
	m.Kill()
	if log := m.log.Since(mark); PortInUse(log) {
		return fmt.Errorf("%w: mosquitto on %s: %s", ErrPortInUse, m.Addr(), log)
	}
	return fmt.Errorf("testtool: mosquitto on %s exited, or did not listen within 10s:\n%s", m.Addr(), m.log.Since(mark))
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
