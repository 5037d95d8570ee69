package testtool

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GatewayPackage is the gateway command's import path: what Build builds
// unless told otherwise.
const GatewayPackage = "fieldlink/cmd/gateway"

// Build says how to build a Go command for a test. The zero value builds
// the development gateway for this machine, as `go build` would.
type Build struct {
	Package string   // import path; "" is GatewayPackage
	Tags    []string // build tags, e.g. field, nethttpomithttp2
	GOARCH  string   // cross-compile for linux/GOARCH ("" is this machine)
	GOARM   string   // with GOARCH arm: 6 or 7
	Static  bool     // CGO_ENABLED=0
	Race    bool     // -race
	Release bool     // as the release is built: -trimpath, no VCS stamp, -ldflags "-s -w"
	Out     string   // the binary's path; "" is a file in a temporary directory of the test
}

// Args are the go command's arguments for b, the package last.
func (b Build) Args(out string) []string {
	args := []string{"build"}
	if b.Release {
		args = append(args, "-trimpath", "-buildvcs=false", "-ldflags", "-s -w")
	}
	if b.Race {
		args = append(args, "-race")
	}
	if len(b.Tags) > 0 {
		args = append(args, "-tags", strings.Join(b.Tags, ","))
	}
	pkg := b.Package
	if pkg == "" {
		pkg = GatewayPackage
	}
	return append(args, "-o", out, pkg)
}

// Env is the go command's environment for b: the test's own, with the
// target and cgo settings b asks for.
func (b Build) Env() []string {
	env := os.Environ()
	if b.Static {
		env = append(env, "CGO_ENABLED=0")
	}
	if b.GOARCH != "" {
		env = append(env, "GOOS=linux", "GOARCH="+b.GOARCH)
	}
	if b.GOARM != "" {
		env = append(env, "GOARM="+b.GOARM)
	}
	return env
}

// Run builds the command and returns the binary's path; a failed build
// fails the test with the compiler's output. go test puts its own
// toolchain first in the test's PATH, so the binary is built by the Go
// that runs the test.
func (b Build) Run(t testing.TB) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build %s with: %v", b.Package, err)
	}
	out := b.Out
	if out == "" {
		name := filepath.Base(b.Package)
		if b.Package == "" {
			name = "gateway"
		}
		out = filepath.Join(t.TempDir(), name)
	}
	cmd := exec.Command(gobin, b.Args(out)...)
	cmd.Env = b.Env()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(b.Args(out), " "), err, msg)
	}
	return out
}

// BuildGateway builds the development gateway for this machine into a
// temporary directory of the test and returns its path.
func BuildGateway(t testing.TB) string {
	t.Helper()
	return Build{}.Run(t)
}
