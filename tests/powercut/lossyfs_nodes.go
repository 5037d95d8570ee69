package powercut

import (
	"context"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

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
