// Package kclock tells whether the kernel holds the wall clock as
// synchronised (NTP), and gives this boot's identity: what the gateway
// needs to know whether a time it reads is true, and whether a monotonic
// reading taken earlier belongs to the same boot.
package kclock

import (
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// MinTrue is the earliest wall-clock time taken as true, whatever the
// kernel says: no reading of this gateway's was ever taken before it.
var MinTrue = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

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

// Mono is the monotonic clock now (CLOCK_MONOTONIC: time since this boot,
// not counting suspend), or, where it cannot be read, this process's
// monotonic time since it started.
func Mono() time.Duration { return MonoAt(time.Now()) }

// anchor and anchorMono are one reading of both clocks when the process
// started: MonoAt counts from them on Go's own monotonic reading.
var anchor, anchorMono = time.Now(), mono()

// MonoAt is CLOCK_MONOTONIC when at was read: at must come from time.Now
// in this process (it carries Go's monotonic reading; a time without one
// gives a wall-clock difference).
func MonoAt(at time.Time) time.Duration { return anchorMono + at.Sub(anchor) }

// lookEvery is how often a Clock asks the kernel again.
const lookEvery = time.Second

// Clock tells the readings to mark as taken from an unsynchronised clock.
// It asks the kernel at most once a second. Safe for concurrent use; the
// zero value asks the kernel.
//
// A step of the wall clock makes it ask again at once: a clock set by hand
// or by a program leaves the kernel's state unsynchronised, and the
// readings of the rest of the second would otherwise carry the stepped
// time unmarked. It sees a step as a change of the wall clock minus the
// monotonic clock by more than maxSlew since the last look (a slewing
// clock moves it by 0.5 ms a second at the most).
type Clock struct {
	// Synced reports whether the wall clock is synchronised; nil means
	// Synced, the kernel's state.
	Synced func() bool
	// Mono is the monotonic clock when a reading was taken; nil means
	// MonoAt. Tests give their own, to step the wall clock.
	Mono func(at time.Time) time.Duration
	// Now is the wall clock at a look; nil means time.Now. Tests give
	// their own.
	Now func() time.Time

	next   atomic.Int64 // MonoAt of the next look, in nanoseconds
	offset atomic.Int64 // wall minus monotonic clock at the last look, in nanoseconds
	synced atomic.Bool
}

// maxSlew is the most that the wall clock minus the monotonic clock moves
// between two looks without a step.
const maxSlew = 50 * time.Millisecond

// Unsynced reports whether a reading taken at at (from time.Now) cannot be
// vouched for: the kernel did not hold the clock as synchronised, or at is
// before MinTrue. mono is CLOCK_MONOTONIC at at, for a later re-stamp.
func (c *Clock) Unsynced(at time.Time) (unsynced bool, mono time.Duration) {
	mono = c.mono(at)
	off := at.UnixNano() - int64(mono)
	if int64(mono) >= c.next.Load() || time.Duration(off-c.offset.Load()).Abs() > maxSlew {
		f := c.Synced
		if f == nil {
			f = Synced
		}
		synced := f()
		// The kernel's answer is about the clock as it is now, which a
		// step since the reading (a wrong clock set right, say) makes
		// another clock than the reading's: such a reading is not
		// vouched for.
		now := time.Now
		if c.Now != nil {
			now = c.Now
		}
		t := now()
		tMono := c.mono(t)
		tOff := t.UnixNano() - int64(tMono)
		c.synced.Store(synced)
		c.offset.Store(tOff)
		c.next.Store(int64(tMono + lookEvery))
		if time.Duration(tOff-off).Abs() > maxSlew {
			return true, mono
		}
	}
	if c.synced.Load() && !at.Before(MinTrue) {
		return false, 0
	}
	return true, mono
}

// mono is the monotonic clock when at was read.
func (c *Clock) mono(at time.Time) time.Duration {
	if c.Mono != nil {
		return c.Mono(at)
	}
	return MonoAt(at)
}
