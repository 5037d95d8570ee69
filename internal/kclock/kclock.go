// Package kclock tells whether the kernel holds the wall clock as
// synchronised (NTP), and gives this boot's identity: what the gateway
// needs to know whether a time it reads is true, and whether a monotonic
// reading taken earlier belongs to the same boot.
package kclock

import (
	"os"
	"strings"
	"time"
)

// Synced reports whether the kernel says the wall clock is synchronised:
// its NTP maximum error is under 16 s, as timedatectl reads it. A system
// that cannot tell (not Linux) reports false: a time that cannot be
// vouched for is treated as unsynchronised.
func Synced() bool {
	synced, _, ok := State()
	return synced && ok
}

// State is the kernel's NTP state: synchronised, its maximum error, and
// whether it could be read at all.
func State() (synced bool, maxError time.Duration, ok bool) { return state() }

// BootID is this boot's random id (/proc/sys/kernel/random/boot_id), or ""
// where there is none. Monotonic readings compare only within one boot.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
