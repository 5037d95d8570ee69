//go:build unix

package status

import (
	"syscall"

	"fieldlink/metrics"
)

// Disk returns the space of the file system that holds path.
func Disk(path string) (metrics.DiskSpace, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return metrics.DiskSpace{}, false
	}
	bs := uint64(st.Bsize)
	return metrics.DiskSpace{Path: path, Free: uint64(st.Bavail) * bs, Total: uint64(st.Blocks) * bs}, true
}
