package powercut

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLossyFSFaults: the filesystem fails as a dying card does, and works
// again once the fault is lifted, with what it held before.
func TestLossyFSFaults(t *testing.T) {
	l := mountLossy(t)
	path := filepath.Join(l.dir, "card")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}

	l.SetFault(Fault{FsyncErr: syscall.EIO})
	if _, err := f.WriteAt([]byte("during"), 0); err != nil {
		t.Fatalf("a write with EIO on fsync only: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync: %v, want EIO", err)
	}

	l.SetFault(Fault{WriteErr: syscall.EROFS})
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write: %v, want EROFS", err)
	}
	if _, err := os.Create(filepath.Join(l.dir, "new")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create: %v, want EROFS", err)
	}

	l.SetFault(Fault{WriteErr: syscall.ENOSPC})
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write: %v, want ENOSPC", err)
	}
	if err := f.Truncate(1 << 20); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("growing truncate: %v, want ENOSPC", err)
	}

	l.SetFault(Fault{})
	if _, err := f.WriteAt([]byte("after!"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "after!" {
		t.Fatalf("after the fault: %q", got)
	}
}
