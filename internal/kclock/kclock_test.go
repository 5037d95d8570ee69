package kclock

import (
	"runtime"
	"testing"
	"time"
)

func TestStateAndBootID(t *testing.T) {
	synced, maxErr, ok := State()
	if runtime.GOOS == "linux" && !ok {
		t.Fatal("adjtimex did not read on Linux")
	}
	if Synced() != (synced && ok) || maxErr < 0 {
		t.Fatalf("Synced %v, State %v %v %v", Synced(), synced, maxErr, ok)
	}
	if id := BootID(); runtime.GOOS == "linux" && len(id) != 36 {
		t.Fatalf("boot id %q, want a UUID", id)
	}
}

// TestClockMarks: a reading is marked while the clock is not synchronised
// or before MinTrue; the kernel is asked at most once a second of the
// monotonic clock.
func TestClockMarks(t *testing.T) {
	synced, asked := false, 0
	c := &Clock{Synced: func() bool { asked++; return synced }}
	now := time.Now()
	if u, mono := c.Unsynced(now); !u || mono != MonoAt(now) || mono <= 0 {
		t.Fatalf("unsynced clock: %v %v", u, mono)
	}
	synced = true
	if u, _ := c.Unsynced(now); !u || asked != 1 {
		t.Fatalf("within the second: %v, asked %d (want the cached answer)", u, asked)
	}
	later := now.Add(2 * time.Second) // keeps the monotonic reading
	if u, mono := c.Unsynced(later); u || mono != 0 || asked != 2 {
		t.Fatalf("synced a second later: %v %v, asked %d", u, mono, asked)
	}
	old := later.AddDate(-60, 0, 0) // 1970 and synced: not true
	if u, _ := c.Unsynced(old); !u {
		t.Fatal("a reading before MinTrue is not marked")
	}
	if d := MonoAt(later) - MonoAt(now); d != 2*time.Second {
		t.Fatalf("MonoAt differs by %v over 2 s", d)
	}
}

// TestClockSeesAStep: a step of the wall clock within the second makes
// the Clock ask the kernel again at once, which then says unsynchronised
// (a clock set by hand or by a program): the readings after the step are
// marked, not stamped an hour off without the mark; a clock that only
// runs on is asked once a second still.
func TestClockSeesAStep(t *testing.T) {
	synced, asked := true, 0
	mono := time.Hour
	wall := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	c := &Clock{Synced: func() bool { asked++; return synced }, Mono: func(time.Time) time.Duration { return mono }, Now: func() time.Time { return wall }}
	if u, _ := c.Unsynced(wall); u || asked != 1 {
		t.Fatalf("synced clock: unsynced %v, asked %d", u, asked)
	}
	tick := func(d time.Duration) { mono += d; wall = wall.Add(d) }
	tick(10 * time.Millisecond)
	if u, _ := c.Unsynced(wall); u || asked != 1 {
		t.Fatalf("10 ms on, no step: unsynced %v, asked %d (want the cached answer)", u, asked)
	}
	for _, step := range []time.Duration{-time.Hour, time.Hour, 200 * time.Millisecond} {
		// The kernel's state after the step: unsynchronised.
		synced = false
		tick(10 * time.Millisecond)
		wall = wall.Add(step)
		before := asked
		if u, m := c.Unsynced(wall); !u || m != mono || asked != before+1 {
			t.Fatalf("stepped %v within the second: unsynced %v, mono %v (want %v), asked %d (want %d)", step, u, m, mono, asked, before+1)
		}
		// Synchronised again, no further step: the cached answer holds
		// for the second.
		synced = true
		tick(10 * time.Millisecond)
		if u, _ := c.Unsynced(wall); !u || asked != before+1 {
			t.Fatalf("after the step of %v, no further step: unsynced %v, asked %d (want the cached answer)", step, u, asked)
		}
		tick(time.Second)
		if u, _ := c.Unsynced(wall); u || asked != before+2 {
			t.Fatalf("a second after the step of %v: unsynced %v, asked %d", step, u, asked)
		}
	}
}

// A reading taken while the clock was wrong, looked at after the clock was
// set right and synchronised (the look due then): the kernel's "synced" is
// about the clock as it is at the look, not the reading's, which stays
// marked. Before, it went out an hour off without the mark.
func TestClockStepBetweenReadingAndLook(t *testing.T) {
	synced, mono := true, time.Hour
	wall := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	readings := map[int64]time.Duration{} // a reading's wall time → the monotonic clock then
	c := &Clock{
		Synced: func() bool { return synced },
		Mono: func(at time.Time) time.Duration {
			if m, ok := readings[at.UnixNano()]; ok {
				return m
			}
			return mono
		},
		Now: func() time.Time { return wall },
	}
	read := func() time.Time { readings[wall.UnixNano()] = mono; return wall }
	tick := func(d time.Duration) { mono += d; wall = wall.Add(d) }
	if u, _ := c.Unsynced(read()); u {
		t.Fatal("synced clock: marked")
	}
	// Stepped an hour ahead by hand: unsynchronised.
	tick(100 * time.Millisecond)
	wall, synced = wall.Add(time.Hour), false
	if u, _ := c.Unsynced(read()); !u {
		t.Fatal("an hour ahead, unsynchronised: not marked")
	}
	// 1.5 s on, a reading an hour ahead; before it is looked at, NTP sets
	// the clock right and the kernel says synchronised.
	tick(1500 * time.Millisecond)
	r := read()
	tick(200 * time.Millisecond)
	wall, synced = wall.Add(-time.Hour), true
	if u, m := c.Unsynced(r); !u || m != readings[r.UnixNano()] {
		t.Fatalf("a reading an hour ahead, looked at after the clock was set right: unsynced %v, mono %v; want marked with its monotonic reading", u, m)
	}
	// The readings after it are true.
	tick(10 * time.Millisecond)
	if u, _ := c.Unsynced(read()); u {
		t.Fatal("the clock set right and synchronised: a later reading is marked")
	}
}
