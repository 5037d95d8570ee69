//go:build !linux

package status

import "time"

// kernelClock cannot read the NTP state off Linux.
func kernelClock() (synced bool, maxError time.Duration, ok bool) { return false, 0, false }
