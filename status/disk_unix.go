//go:build unix

package status

import (
	"syscall"
)

// Disk returns the space of the file system that holds path.
func Disk(path string) (DiskSpace, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return DiskSpace{}, false
	}
	bs := uint64(st.Bsize)
	return DiskSpace{Path: path, Free: uint64(st.Bavail) * bs, Total: uint64(st.Blocks) * bs}, true
}
