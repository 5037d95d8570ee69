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
