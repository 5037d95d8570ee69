package powercut

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
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

// dirNode is a directory of the mount.
type dirNode struct {
	fs.Inode
	l *LossyFS
	d *mdir
}

// fileNode is a regular file of the mount.
type fileNode struct {
	fs.Inode
	l *LossyFS
	f *mfile
}

var (
	_ fs.NodeLookuper  = (*dirNode)(nil)
	_ fs.NodeReaddirer = (*dirNode)(nil)
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeMknoder   = (*dirNode)(nil)
	_ fs.NodeMkdirer   = (*dirNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRmdirer   = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeSetattrer = (*dirNode)(nil)
	_ fs.NodeFsyncer   = (*dirNode)(nil)

	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeReader    = (*fileNode)(nil)
	_ fs.NodeWriter    = (*fileNode)(nil)
	_ fs.NodeFsyncer   = (*fileNode)(nil)
	_ fs.NodeFlusher   = (*fileNode)(nil)
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeAllocater = (*fileNode)(nil)
)

// node returns the inode of entry e, named name, under n.
func (n *dirNode) node(ctx context.Context, e any) *fs.Inode {
	switch e := e.(type) {
	case *mdir:
		return n.NewInode(ctx, &dirNode{l: n.l, d: e}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: e.ino})
	case *mfile:
		return n.NewInode(ctx, &fileNode{l: n.l, f: e}, fs.StableAttr{Mode: e.typ, Ino: e.ino})
	}
	return nil
}

func attrOf(e any, out *fuse.Attr) {
	switch e := e.(type) {
	case *mdir:
		out.Ino, out.Mode, out.Nlink = e.ino, syscall.S_IFDIR|0o755, 2
	case *mfile:
		out.Ino, out.Mode, out.Nlink = e.ino, e.typ|e.mode, 1
		out.Size = uint64(len(e.data))
		out.Blocks = (out.Size + 511) / 512
		out.SetTimes(nil, &e.mtime, &e.mtime)
	}
	out.Blksize = 4096
}

func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	e, ok := n.d.entries[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	attrOf(e, &out.Attr)
	return n.node(ctx, e), 0
}

func (n *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	names := make([]string, 0, len(n.d.entries))
	for name := range n.d.entries {
		names = append(names, name)
	}
	sort.Strings(names)
	list := make([]fuse.DirEntry, 0, len(names))
	for _, name := range names {
		var a fuse.Attr
		attrOf(n.d.entries[name], &a)
		list = append(list, fuse.DirEntry{Name: name, Ino: a.Ino, Mode: a.Mode})
	}
	return fs.NewListDirStream(list), 0
}

func (n *dirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	if e := n.l.refusedLocked(); e != 0 {
		return nil, nil, 0, e
	}
	if _, ok := n.d.entries[name]; ok {
		return nil, nil, 0, syscall.EEXIST
	}
	f := &mfile{ino: n.l.ino(), typ: syscall.S_IFREG, mode: mode & 0o7777, mtime: time.Now()}
	n.d.entries[name] = f
	attrOf(f, &out.Attr)
	return n.node(ctx, f), nil, 0, 0
}

// Mknod makes a socket's name (bind(2) of a unix socket), nothing else.
func (n *dirNode) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, syscall.EPERM
	}
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	if _, ok := n.d.entries[name]; ok {
		return nil, syscall.EEXIST
	}
	f := &mfile{ino: n.l.ino(), typ: syscall.S_IFSOCK, mode: mode & 0o7777, mtime: time.Now()}
	n.d.entries[name] = f
	attrOf(f, &out.Attr)
	return n.node(ctx, f), 0
}

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	if _, ok := n.d.entries[name]; ok {
		return nil, syscall.EEXIST
	}
	d := &mdir{ino: n.l.ino(), entries: map[string]any{}}
	n.d.entries[name] = d
	attrOf(d, &out.Attr)
	return n.node(ctx, d), 0
}

func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	e, ok := n.d.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	if _, dir := e.(*mdir); dir {
		return syscall.EISDIR
	}
	delete(n.d.entries, name)
	return 0
}

func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	e, ok := n.d.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	d, dir := e.(*mdir)
	if !dir {
		return syscall.ENOTDIR
	}
	if len(d.entries) > 0 {
		return syscall.ENOTEMPTY
	}
	delete(n.d.entries, name)
	return 0
}

func (n *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags != 0 {
		return syscall.EINVAL // no RENAME_EXCHANGE or RENAME_NOREPLACE: nothing here asks for them
	}
	to, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	e, ok := n.d.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	if old, ok := to.d.entries[newName]; ok {
		if d, dir := old.(*mdir); dir && len(d.entries) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	delete(n.d.entries, name)
	to.d.entries[newName] = e
	return 0
}

func (n *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	attrOf(n.d, &out.Attr)
	return 0
}

// Setattr accepts a change of mode or owner and keeps none: every file
// belongs to the mounting user.
func (n *dirNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	attrOf(n.d, &out.Attr)
	return 0
}

// Fsync of a directory: names are durable at once, there is nothing to do.
func (n *dirNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

func (n *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	d := n.f.data
	off = min(off, int64(len(d)))
	end := min(off+int64(len(dest)), int64(len(d)))
	return fuse.ReadResultData(slices.Clone(d[off:end])), 0
}

func (n *fileNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	if e := n.l.fault.WriteErr; e != 0 {
		return 0, e
	}
	n.f.resize(off + int64(len(data)))
	copy(n.f.data[off:], data)
	n.f.mtime = time.Now()
	return uint32(len(data)), 0
}

// resize grows the file's data to at least size bytes, the new ones zero.
func (f *mfile) resize(size int64) {
	if size <= int64(len(f.data)) {
		return
	}
	if size <= int64(cap(f.data)) {
		old := len(f.data)
		f.data = f.data[:size]
		clear(f.data[old:])
		return
	}
	n := make([]byte, size, size+size/4)
	copy(n, f.data)
	f.data = n
}

// Fsync makes the file's contents durable: they survive the next cut.
func (n *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	n.l.mu.Lock()
	f := n.l.fault
	n.l.mu.Unlock()
	if f.FsyncDelay > 0 {
		time.Sleep(f.FsyncDelay) // a worn card's fsync: the caller waits
	}
	if f.FsyncErr != 0 {
		return f.FsyncErr
	}
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	n.f.durable = append(n.f.durable[:0], n.f.data...)
	n.l.fsyncs++
	return 0
}

func (n *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	attrOf(n.f, &out.Attr)
	return 0
}

// Setattr truncates or extends (unsynced, like a write); a change of mode
// is kept, of owner ignored.
func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	if size, ok := in.GetSize(); ok && n.l.fault.WriteErr != 0 && int64(size) > int64(len(n.f.data)) {
		return n.l.fault.WriteErr
	}
	if size, ok := in.GetSize(); ok {
		if int64(size) < int64(len(n.f.data)) {
			n.f.data = n.f.data[:size]
		} else {
			n.f.resize(int64(size))
		}
		n.f.mtime = time.Now()
	}
	if mode, ok := in.GetMode(); ok {
		n.f.mode = mode & 0o7777
	}
	attrOf(n.f, &out.Attr)
	return 0
}

// Allocate reserves space (fallocate): it extends the file unless asked to
// keep its size.
func (n *fileNode) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	const keepSize = 0x1 // FALLOC_FL_KEEP_SIZE
	if mode&^keepSize != 0 {
		return syscall.EOPNOTSUPP
	}
	n.l.mu.Lock()
	defer n.l.mu.Unlock()
	if e := n.l.fault.WriteErr; e != 0 {
		return e
	}
	if mode&keepSize == 0 {
		n.f.resize(int64(off + size))
	}
	return 0
}
