package testtool

import (
	"os"
	"path/filepath"
	"testing"
)

// Golden writes with update, then passes on the same bytes and fails on
// others.
func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "testdata", "x.golden")
	Golden(t, path, []byte("one\n"), true)
	if b, err := os.ReadFile(path); err != nil || string(b) != "one\n" {
		t.Fatalf("after update: %q, %v", b, err)
	}
	Golden(t, path, []byte("one\n"), false)
	ft := &fakeT{TB: t}
	Golden(ft, path, []byte("two\n"), false)
	if !ft.failed {
		t.Error("a difference did not fail the test")
	}
}

// fakeT records a failure instead of failing.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.failed = true }
