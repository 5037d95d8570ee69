package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// restartWith starts a new manager as gateway run does when Startup
// failed: from the state Startup gave, whatever its error.
func (r *rig) restartWith() {
	r.t.Helper()
	_, st, _ := Startup(r.local, profiles)
	m, err := NewManager(r.local, st, r.gw, Options{Profiles: profiles, Now: r.clock, Elapsed: r.elapsed, Grace: 5 * time.Second})
	if err != nil {
		r.t.Fatal(err)
	}
	r.m = m
}

func (r *rig) corrupt(name string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, "remote", name), []byte("{\x00garbage"), 0o640); err != nil {
		r.t.Fatal(err)
	}
}

// confirmed pulls serial and lets its probation pass.
func (r *rig) confirmed(serial uint64) {
	r.t.Helper()
	if rep := r.pull(r.bundle(serial, "", "")); rep.State != StateProbation {
		r.t.Fatalf("bundle %d: %+v", serial, rep)
	}
	r.advance(2 * time.Minute)
}

// Rollback protection does not rest on state.json alone: with it
// corrupted, the gateway starts from the local file and still refuses a
// serial below the highest it applied.
func TestCorruptStateDoesNotReapplyAnOldSerial(t *testing.T) {
	r := newRig(t)
	for _, s := range []uint64{25, 28, 29, 33} {
		r.confirmed(s)
	}
	r.corrupt("state.json")
	r.restartWith()
	if rep := r.pull(r.bundle(10, "", "")); rep.State != StateRefused || !strings.Contains(rep.Reason, "33") {
		t.Fatalf("serial 10 after 33, with state.json corrupted: %+v; want refused", rep)
	}
	if rep := r.pull(r.bundle(33, "", "")); rep.State != StateRefused {
		t.Errorf("serial 33 again, with its state lost: %+v; want refused", rep)
	}
	if rep := r.pull(r.bundle(34, "", "")); rep.State != StateProbation {
		t.Errorf("serial 34: %+v; want probation", rep)
	}
}

// The serial floor's own file corrupted: state.json still knows, and the
// file is written again.
func TestCorruptFloorFallsBackOnTheState(t *testing.T) {
	r := newRig(t)
	r.confirmed(25)
	r.corrupt(floorFile)
	r.restartWith()
	if rep := r.pull(r.bundle(10, "", "")); rep.State != StateRefused {
		t.Fatalf("serial 10 after 25, with the floor's file corrupted: %+v; want refused", rep)
	}
	r.corrupt("state.json")
	r.restartWith()
	if rep := r.pull(r.bundle(11, "", "")); rep.State != StateRefused || !strings.Contains(rep.Reason, "25") {
		t.Fatalf("serial 11 after 25, state.json corrupted after the floor was rewritten: %+v; want refused", rep)
	}
}

// Both records unreadable: nothing says which serials were applied, so
// none is, until someone removes them.
func TestBothRecordsCorruptRefusesEveryBundle(t *testing.T) {
	r := newRig(t)
	r.confirmed(25)
	r.corrupt(floorFile)
	r.corrupt("state.json")
	r.restartWith()
	if rep := r.pull(r.bundle(40, "", "")); rep.State != StateRefused || !strings.Contains(rep.Reason, floorFile) {
		t.Fatalf("both records corrupted: %+v; want refused, naming %s", rep, floorFile)
	}
	r.restartWith()
	if rep := r.pull(r.bundle(41, "", "")); rep.State != StateRefused {
		t.Fatalf("both records corrupted, after a restart: %+v; want refused", rep)
	}
}
