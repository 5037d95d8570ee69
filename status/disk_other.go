//go:build !unix

package status

import "fieldlink/metrics"

// Disk cannot read a file system's space here.
func Disk(path string) (metrics.DiskSpace, bool) { return metrics.DiskSpace{}, false }
