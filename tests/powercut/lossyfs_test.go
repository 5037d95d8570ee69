package powercut

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"fieldlink/internal/testtool"
)

// TestLossyFS: at a cut, a file keeps what its last fsync made durable and
// loses the rest; a file never synced is there, empty; names stand.
func TestLossyFS(t *testing.T) {
	l := mountLossy(t)
	dir := l.dir
	write := func(name string, data []byte, sync bool) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("synced", []byte("one"), true)
	write("synced", []byte("two, longer"), false)
	write("never", []byte("lost"), false)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	write("sub/moved", []byte("kept"), true)
	if err := os.Rename(filepath.Join(dir, "sub/moved"), filepath.Join(dir, "renamed")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "synced")); string(got) != "two, longer" {
		t.Fatalf("before the cut, synced reads %q", got)
	}
	n, err := l.Cut()
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("the cut says %d files lost writes, want 2", n)
	}
	for name, want := range map[string][]byte{"synced": []byte("one"), "never": {}, "renamed": []byte("kept")} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("after the cut: %v", err)
		} else if !bytes.Equal(got, want) {
			t.Errorf("after the cut, %s reads %q, want %q", name, got, want)
		}
	}
	if l.Fsyncs() != 2 {
		t.Errorf("fsyncs = %d, want 2", l.Fsyncs())
	}
}

// mountLossy mounts a LossyFS on a new directory until the test ends, or
// skips (fails under CI) where FUSE is missing.
func mountLossy(t *testing.T) *LossyFS {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testtool.Unsupported(t, "/dev/fuse: the lossy filesystem is a FUSE filesystem")
	}
	if os.Geteuid() != 0 {
		testtool.Require(t, "fusermount3", "fuse3")
	}
	dir := t.TempDir()
	l, err := MountLossy(dir)
	if err != nil {
		testtool.Unsupported(t, err.Error())
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}
