//go:build !unix

package status

// Disk cannot read a file system's space here.
func Disk(path string) (DiskSpace, bool) { return DiskSpace{}, false }
