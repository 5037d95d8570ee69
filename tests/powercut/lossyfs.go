package powercut

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// LossyFS is a FUSE filesystem held in memory that loses, at a power cut,
// every write not yet fsynced, as LazyFS does: a file's contents go back to
// what they were at its last fsync (or fdatasync). Names are metadata and
// survive: a file created and never synced is there after the cut, empty;
// a rename or an unlink stands. It is the power domain of the fast level:
// the program under test runs on it as a process, the cut kills the
// process, then [LossyFS.Cut] drops what was not synced and mounts the
// filesystem again, so that the kernel's page cache of the old mount, which
// a real power cut would lose too, is gone with it.
//
// The kernel takes flock and POSIX locks itself (the filesystem does not
// implement them), and bbolt's mmap reads go through the page cache of the
// mount, which writes fill (no writeback cache: every write reaches the
// filesystem before it returns).
type LossyFS struct {
	dir string

	mu      sync.Mutex
	root    *mdir
	nextIno uint64
	fsyncs  int
	dropped int // files whose unsynced contents a cut threw away
	server  *fuse.Server
	fault   Fault // what a dying card answers meanwhile (SetFault)
}

// Fault is how the filesystem fails, as a dying SD card does: its writes
// (and, for EROFS or ENOSPC, whatever would change or grow a file) answer
// WriteErr, its fsyncs answer FsyncErr, and each fsync takes FsyncDelay
// first. The zero Fault is a card that works.
type Fault struct {
	WriteErr, FsyncErr syscall.Errno
	FsyncDelay         time.Duration
}

// SetFault makes the filesystem fail as f says from now on.
func (l *LossyFS) SetFault(f Fault) {
	l.mu.Lock()
	l.fault = f
	l.mu.Unlock()
}

// refusedLocked is the error a change to the names answers under the
// fault: a read-only filesystem (EROFS) refuses them; l.mu is held.
func (l *LossyFS) refusedLocked() syscall.Errno {
	if l.fault.WriteErr == syscall.EROFS {
		return syscall.EROFS
	}
	return 0
}

// mdir is a directory; its entries are *mdir or *mfile.
type mdir struct {
	ino     uint64
	entries map[string]any
}

// mfile is a file: data as the program sees it, durable as the last fsync
// left it.
type mfile struct {
	ino     uint64
	data    []byte
	durable []byte
	typ     uint32 // S_IFREG, or S_IFSOCK for a socket's name (a daemon's control socket)
	mode    uint32
	mtime   time.Time
}

// MountLossy mounts an empty LossyFS on dir, which must exist. Unmount it
// with Close.
func MountLossy(dir string) (*LossyFS, error) {
	l := &LossyFS{dir: dir, nextIno: 2, root: &mdir{ino: 1, entries: map[string]any{}}}
	if err := l.mount(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *LossyFS) mount() error {
	zero := time.Duration(0)
	opt := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:      "lossyfs",
			Name:        "lossyfs",
			DirectMount: true, // as root, mount(2) itself; else fusermount3
		},
		// No attribute or entry caching: after a cut the sizes change
		// under the kernel's feet, and the mount is new anyway.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
	}
	srv, err := fs.Mount(l.dir, &dirNode{l: l, d: l.root}, opt)
	if err != nil {
		return fmt.Errorf("lossyfs: mount %s: %w", l.dir, err)
	}
	l.mu.Lock()
	l.server = srv
	l.mu.Unlock()
	return nil
}

// Cut is the power cut, once the program on the filesystem is dead: the
// filesystem is unmounted, every file's contents go back to their last
// fsync, and it is mounted again. It returns how many files lost writes.
func (l *LossyFS) Cut() (int, error) {
	if err := l.unmount(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	n := 0
	var drop func(d *mdir)
	drop = func(d *mdir) {
		for _, e := range d.entries {
			switch e := e.(type) {
			case *mdir:
				drop(e)
			case *mfile:
				if !slices.Equal(e.data, e.durable) {
					n++
				}
				e.data = slices.Clone(e.durable)
			}
		}
	}
	drop(l.root)
	l.dropped += n
	l.mu.Unlock()
	return n, l.mount()
}

// Fsyncs is how many fsyncs the filesystem has served.
func (l *LossyFS) Fsyncs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fsyncs
}

// Close unmounts the filesystem.
func (l *LossyFS) Close() error { return l.unmount() }

// unmount unmounts, lazily (fusermount3 -u -z) if a straggler still holds
// the mount, and waits for the server to stop.
func (l *LossyFS) unmount() error {
	l.mu.Lock()
	srv := l.server
	l.server = nil
	l.mu.Unlock()
	if srv == nil {
		return nil
	}
	var err error
	for range 50 {
		if err = srv.Unmount(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // a dead process's files are released asynchronously
	}
	if err != nil {
		if out, lerr := exec.Command("fusermount3", "-u", "-z", l.dir).CombinedOutput(); lerr != nil {
			if uerr := syscall.Unmount(l.dir, syscall.MNT_DETACH); uerr != nil {
				return fmt.Errorf("lossyfs: unmount %s: %v; fusermount3 -u -z: %v %s; umount -l: %w", l.dir, err, lerr, out, uerr)
			}
		}
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("lossyfs: the FUSE server did not stop within 10s of the unmount")
	}
}

func (l *LossyFS) ino() uint64 {
	l.nextIno++
	return l.nextIno
}
