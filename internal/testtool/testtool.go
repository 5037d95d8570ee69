// Package testtool lets tests use real external peers (socat, pymodbus,
// mbpoll, mosquitto, qemu) and say clearly when one is missing.
//
// It is also the one place for the plumbing tests share, so that no test
// package keeps a copy of its own: building the gateway binary ([Build],
// [BuildGateway]: tags, cross target, race, release flags), starting a
// server of another process on loopback ports it is told, again on other
// ports when one was taken ([OnFreshPorts], [OnSamePorts]), an address
// that refuses connections ([RefusedAddr]), an HTTP get ([HTTPGet], and
// [Get] for polling), waiting for a condition ([WaitFor], [Eventually]),
// a site file of one bus ([SiteFile]), and a TCP relay a test takes down
// as a network outage ([Link]).
//
// Locally a missing tool skips the test with a message naming the Debian
// package to install. Under CI (CI=true) a missing tool fails the test:
// CI must install every peer, and a skip there would hide that it did not.
package testtool

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// InCI reports whether the tests run under CI, where a missing tool is an
// error: CI set to true, 1 or yes, in any case. It is the one reading of CI
// in the module.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// Missing skips the test (locally) or fails it (in CI) because what is named
// cannot be found; pkg is the Debian package that provides it.
func Missing(t testing.TB, what, pkg string) {
	t.Helper()
	msg := fmt.Sprintf("%s not found: install the Debian package %q (apt-get install -y %s)", what, pkg, pkg)
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Unsupported skips the test (locally) or fails it (in CI) because the
// machine lacks a capability the test needs that no package provides: root,
// a tmpfs or loop mount, an IPv6 loopback. why says what is missing. CI
// runs as root on a host that has them all, so a skip there would hide a
// test that never ran.
func Unsupported(t testing.TB, why string) {
	t.Helper()
	msg := "unsupported here: " + why
	if InCI() {
		t.Fatal(msg + " (CI must provide it)")
	}
	t.Skip(msg)
}

// Require returns the path of binary, or skips/fails the test when absent.
func Require(t testing.TB, binary, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(binary)
	if err != nil {
		Missing(t, binary, pkg)
	}
	return p
}

// SystemPython is the interpreter that sees Debian's python3-* packages.
const SystemPython = "/usr/bin/python3"

// RequirePython checks that the system Python can import module, and returns
// the interpreter's path.
func RequirePython(t testing.TB, module, pkg string) string {
	t.Helper()
	if _, err := os.Stat(SystemPython); err != nil {
		Missing(t, SystemPython, "python3")
	}
	out, err := exec.Command(SystemPython, "-c", "import "+module).CombinedOutput()
	if err != nil {
		Missing(t, fmt.Sprintf("python module %s (%s)", module, strings.TrimSpace(string(out))), pkg)
	}
	return SystemPython
}

// PtyPair starts socat joining two pseudo-terminals and returns their paths.
// Bytes written to one come out of the other, as on a two-node serial line.
// socat is stopped when the test ends.
func PtyPair(t testing.TB) (a, b string) {
	t.Helper()
	return ptyPair(t, nil)
}

// PtyPairLogged is PtyPair with socat recording the line: every transfer,
// as socat -x writes it ("> " for a→b, "< " for b→a, a timestamp, then the
// bytes in hex), into the returned buffer.
func PtyPairLogged(t testing.TB) (a, b string, log *SyncBuffer) {
	t.Helper()
	log = &SyncBuffer{}
	a, b = ptyPair(t, log)
	return a, b, log
}

func ptyPair(t testing.TB, record *SyncBuffer) (a, b string) {
	t.Helper()
	socat := Require(t, "socat", "socat")
	dir := t.TempDir()
	a, b = filepath.Join(dir, "ptyA"), filepath.Join(dir, "ptyB")
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"-d", "-d"}
	if record != nil {
		args = append(args, "-x")
	}
	args = append(args, "pty,raw,echo=0,link="+a, "pty,raw,echo=0,link="+b)
	cmd := exec.CommandContext(ctx, socat, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start socat: %v", err)
	}
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		n := 0
		for sc.Scan() {
			if record != nil {
				_, _ = record.Write([]byte(sc.Text() + "\n"))
			}
			if strings.Contains(sc.Text(), "starting data transfer loop") {
				n++
				if n == 1 {
					close(ready)
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		<-done
	})
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("socat did not create the pty pair within 10s")
	}
	for _, p := range []string{a, b} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("socat pty %s: %v", p, err)
		}
	}
	return a, b
}

// WaitFor polls cond every few milliseconds until it holds or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Eventually(timeout, 5*time.Millisecond, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Eventually polls cond every interval until it holds (true) or timeout
// passes (false): WaitFor for a caller that says itself what went wrong
// (with the last state it saw) or goes on either way. cond runs at least
// once, and once more after the deadline.
func Eventually(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(interval)
	}
	return true
}
