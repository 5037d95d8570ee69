//go:build unix

package buffer

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockFile opens (creating it if needed) and exclusively locks the file at
// path, waiting at most timeout for another process to let go. The lock is
// flock(2), the one bbolt takes, on this open file description: bbolt is then
// handed this very file (Options.OpenFile) and its own flock succeeds at once.
// created reports whether the file did not exist.
func lockFile(path string, timeout time.Duration) (f *os.File, created bool, err error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, created, nil
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			if err == syscall.EWOULDBLOCK {
				return nil, false, fmt.Errorf("%w (%s still locked after %v)", ErrLocked, path, timeout)
			}
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncDir fsyncs the directory dir, so that a file created or renamed in it
// survives a power cut.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// unmapFile unmaps every mapping of f's file in this process. It cleans up
// after bbolt panicked inside Open, after mapping the file but before
// returning the DB that could unmap it: left alone, such a mapping would
// hold address space (2 GB in all on 32-bit ARM) until the process exits.
// Nothing can use the mapping: the DB that owned it is unreachable.
func unmapFile(f *os.File) {
	fi, err := f.Stat()
	if err != nil {
		return
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer maps.Close()
	type span struct{ start, end uintptr }
	var spans []span
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		inode, err := strconv.ParseUint(fields[4], 10, 64)
		if err != nil || inode != uint64(st.Ino) {
			continue
		}
		maj, min, ok := strings.Cut(fields[3], ":")
		if !ok || !sameDev(maj, min, uint64(st.Dev)) {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			continue
		}
		spans = append(spans, span{uintptr(s), uintptr(e)})
	}
	for _, sp := range spans {
		_, _, _ = syscall.Syscall(syscall.SYS_MUNMAP, sp.start, sp.end-sp.start, 0)
	}
}

// sameDev reports whether the hex major:minor of /proc/self/maps is dev,
// in the kernel's encoding of dev_t.
func sameDev(maj, min string, dev uint64) bool {
	ma, err1 := strconv.ParseUint(maj, 16, 32)
	mi, err2 := strconv.ParseUint(min, 16, 32)
	if err1 != nil || err2 != nil {
		return false
	}
	devMajor := ((dev >> 32) & 0xfffff000) | ((dev >> 8) & 0xfff)
	devMinor := ((dev >> 12) & 0xffffff00) | (dev & 0xff)
	return ma == devMajor && mi == devMinor
}
