package kclock

import (
	"syscall"
	"time"
	"unsafe"
)

// state reads the kernel's NTP state with adjtimex (read only), as
// timedatectl does: synchronised while the maximum error is below 16 s,
// the kernel's value when nothing disciplines the clock. The STA_UNSYNC
// flag is not used: systemd sets it to keep the kernel from writing the
// RTC.
func state() (synced bool, maxError time.Duration, ok bool) {
	var tx syscall.Timex
	if _, err := syscall.Adjtimex(&tx); err != nil {
		return false, 0, false
	}
	maxError = time.Duration(tx.Maxerror) * time.Microsecond
	return maxError < 16*time.Second, maxError, true
}

// mono reads CLOCK_MONOTONIC; zero if it cannot.
func mono() time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
