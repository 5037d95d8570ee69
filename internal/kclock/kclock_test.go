package kclock

import (
	"runtime"
	"testing"
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
