//go:build !linux

package kclock

import "time"

// state cannot read the NTP state off Linux.
func state() (synced bool, maxError time.Duration, ok bool) { return false, 0, false }

// mono cannot read CLOCK_MONOTONIC here: MonoAt counts from the start of
// the process.
func mono() time.Duration { return 0 }
