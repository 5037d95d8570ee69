//go:build crosscheck

// Package crossbuild_test runs scripts/cross-build under go test, so that
// `make test` (and CI) proves the ARM binaries and not only the host one
// (as a step of its own, after the other tests: -tags crosscheck keeps it
// out of `go test ./...`, where it would compete with them for the cores):
// the field build for armv6, armv7, arm64 and amd64, reproducible from
// another path and under the size budget (MAX_MIB), then qemu-check (version, poll
// of the emulator, the SIGILL control, the demo, and the sensors, buffer
// and selector tests as ARM binaries).
package crossbuild_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"fieldlink/internal/testtool"
)

func TestCrossBuildAndQemu(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four binaries and runs tests under qemu for minutes")
	}
	testtool.Require(t, "qemu-arm-static", "qemu-user-static")
	testtool.Require(t, "qemu-aarch64-static", "qemu-user-static")
	dist := t.TempDir()
	env := append(os.Environ(), "DIST="+dist, "VERSION=crosstest", "COMMIT=crosstest", "REPRO=cached",
		"TEST_PKGS=./sensors/... ./buffer/ ./selector/ ./selector/cuckoo/ ./selector/lstm/ ./selector/delphi/", "DEMO_FOR=8s")
	run := func(script string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join("scripts", "cross-build", script))
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		t.Logf("%s:\n%s", script, out)
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return string(out)
	}
	out := run("build")
	for _, want := range []string{"OK    fieldlink-gateway_crosstest_linux_armv6", "OK    fieldlink-gateway_crosstest_linux_arm64"} {
		if !strings.Contains(out, want) {
			t.Errorf("build output lacks %q", want)
		}
	}
	run("qemu-check") // exits non-zero if any step failed
}
