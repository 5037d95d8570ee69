package downlink

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKeepWindow: an id is remembered Keep (never less than a day) of
// the gateway's running time after it arrived, or after its issued_at if
// later; then forgotten, and a command issued no later than a forgotten
// one is refused rather than run again. Running time is counted on the
// monotonic clock (run, here) and kept across restarts; the wall clock
// plays no part.
func TestKeepWindow(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	var run time.Duration // this process's monotonic clock
	mono := func() time.Duration { return run }
	s := openLedger(t, buf, t0, LedgerOptions{Keep: time.Hour, Elapsed: mono}) // under the minimum: a day
	old := command("cmd-old", t0)
	future := command("cmd-future", t0.Add(10*time.Hour)) // a platform clock ahead
	for _, c := range []Command{old, future} {
		begin(t, s, c, t0)
		finish(t, s, Result{ID: c.ID, Status: StatusDone, At: t0})
	}
	run = 23 * time.Hour
	if r := begin(t, s, old, t0.Add(23*time.Hour)); r == nil || r.Status != StatusDone {
		t.Fatalf("23 h later (Keep is at least a day): %+v", r)
	}
	// The duplicate that comes just past the window is answered, and its
	// record kept until the next command: memory and file agree.
	run = 24*time.Hour + time.Minute
	if r := begin(t, s, old, t0.Add(24*time.Hour+time.Minute)); r == nil || r.Status != StatusDone {
		t.Fatalf("just past the window, still in memory: %+v", r)
	}
	consistent(t, s, buf)
	count := func() int {
		n := 0
		_ = buf.ScanAux(prefixID, func(string, []byte) error { n++; return nil })
		return n
	}
	// A restart (a new monotonic clock) with the wall clock a year back:
	// the running time kept in the file forgets cmd-old, and the floor
	// refuses it.
	run = 0
	s = openLedger(t, buf, t0.AddDate(-1, 0, 0), LedgerOptions{Elapsed: mono})
	if n := count(); n != 1 {
		t.Fatalf("%d id records after 24 h of running, want 1 (cmd-future)", n)
	}
	r := begin(t, s, old, t0.Add(25*time.Hour))
	if r == nil || r.Status != StatusRejected || !strings.Contains(r.Reason, "forgotten") {
		t.Fatalf("cmd-old after 24 h of running: %+v, want rejected as forgotten", r)
	}
	run = 5 * time.Hour
	if r := begin(t, s, future, t0.Add(30*time.Hour)); r == nil || r.Status != StatusDone {
		t.Fatalf("cmd-future after 29 h of running (issued 10 h after it arrived): %+v", r)
	}
	// Begin forgets as it goes: after 35 h of running cmd-future is gone.
	run = 11 * time.Hour
	begin(t, s, command("cmd-new", t0.Add(35*time.Hour)), t0.Add(35*time.Hour))
	if _, known := s.ids["cmd-future"]; known || count() != 2 {
		t.Fatalf("35 h later: cmd-future known %v, %d records (want cmd-old's rejection and cmd-new)", known, count())
	}
	consistent(t, s, buf)
	// The floor is cmd-future's issued_at now, whatever the clock says.
	s = openLedger(t, buf, t0, LedgerOptions{Elapsed: mono})
	if r := begin(t, s, command("cmd-late", t0.Add(10*time.Hour)), t0.Add(10*time.Hour)); r == nil || r.Status != StatusRejected {
		t.Fatalf("a new id issued at the forgotten cmd-future's time: %+v, want rejected", r)
	}
	if r := begin(t, s, command("cmd-next", t0.Add(10*time.Hour+time.Second)), t0.Add(10*time.Hour+time.Second)); r != nil {
		t.Fatalf("issued after the floor: %+v, want it run", r)
	}
}

// TestWallClockForgetsNothing: the wall clock stepped years forward,
// without running time, forgets no id.
func TestWallClockForgetsNothing(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	mono := func() time.Duration { return 0 }
	s := openLedger(t, buf, t0, LedgerOptions{Elapsed: mono})
	c := command("cmd-1", t0)
	begin(t, s, c, t0)
	finish(t, s, Result{ID: "cmd-1", Status: StatusDone, At: t0})
	later := t0.AddDate(3, 0, 0)
	s = openLedger(t, buf, later, LedgerOptions{Elapsed: mono})
	begin(t, s, command("cmd-2", later), later) // Begin prunes too
	if r := begin(t, s, c, later); r == nil || r.Status != StatusDone {
		t.Fatalf("cmd-1 with the clock 3 years on and no running time: %+v, want its result", r)
	}
}

// TestRecordWithoutSeen: an id recorded before the ledger kept running
// time is kept a full Keep from the next opening: its age cannot be
// vouched for.
func TestRecordWithoutSeen(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	c := command("cmd-1", t0)
	old, _ := json.Marshal(map[string]any{"id": c.ID, "command": c, "received": t0,
		"result": Result{ID: c.ID, Status: StatusDone, At: t0}})
	if err := buf.UpdateAux(map[string][]byte{prefixID + c.ID: old}, nil); err != nil {
		t.Fatal(err)
	}
	var run time.Duration
	mono := func() time.Duration { return run }
	run = 48 * time.Hour // a process long up when the new code first opens
	s := openLedger(t, buf, t0.AddDate(0, 0, 3), LedgerOptions{Elapsed: mono})
	run += 23 * time.Hour
	if r := begin(t, s, c, t0.AddDate(0, 0, 4)); r == nil || r.Status != StatusDone {
		t.Fatalf("23 h after the opening: %+v, want its result", r)
	}
	run += 2 * time.Hour
	begin(t, s, command("cmd-2", t0.AddDate(0, 0, 4)), t0.AddDate(0, 0, 4))
	if r := begin(t, s, c, t0.AddDate(0, 0, 4)); r == nil || r.Status != StatusRejected {
		t.Fatalf("25 h after the opening: %+v, want forgotten and refused", r)
	}
}

// TestSalvagedFileRefusesOlderCommands: salvage does not keep the aux
// bucket, so the ledger has forgotten every id; it refuses commands issued
// before its new start instead of running them again.
func TestSalvagedFileRefusesOlderCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	buf := openBuffer(t, path)
	s := openLedger(t, buf, t0, LedgerOptions{})
	c := command("cmd-1", t0)
	begin(t, s, c, t0)
	finish(t, s, Result{ID: "cmd-1", Status: StatusDone, At: t0})
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(data[:2*4096]) // both bbolt meta pages and more (pages are 1 KiB or 4 KiB): the buffer salvages the file
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	buf = openBuffer(t, path)
	if buf.Stats().Salvages != 1 {
		t.Fatal("the file was not salvaged")
	}
	t1 := t0.Add(time.Minute)
	s = openLedger(t, buf, t1, LedgerOptions{})
	r := begin(t, s, c, t1)
	if r == nil || r.Status != StatusRejected || !strings.Contains(r.Reason, "salvaged") {
		t.Fatalf("the replayed command after a salvage: %+v, want rejected", r)
	}
	if r := begin(t, s, command("cmd-2", t1.Add(time.Second)), t1.Add(time.Second)); r != nil {
		t.Fatalf("a command issued after the new start: %+v, want it run", r)
	}
	if got := strings.Join(kinds(entries(t, buf)), "|"); got != "start|result cmd-1 rejected|received cmd-2" {
		t.Fatalf("audit log after salvage: %s", got)
	}
}

// TestClockAheadAtStart: a file begun while the clock was a year ahead
// does not refuse every command once the clock is right.
func TestClockAheadAtStart(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	openLedger(t, buf, t0.AddDate(1, 0, 0), LedgerOptions{})
	// Until the kernel says the clock is synchronised, the start stays.
	s := openLedger(t, buf, t0, LedgerOptions{Synced: func() bool { return false }})
	if r := begin(t, s, command("cmd-0", t0.Add(time.Second)), t0.Add(time.Second)); r == nil || r.Status != StatusRejected {
		t.Fatalf("issued before the start, the clock not synchronised: %+v, want rejected", r)
	}
	s = openLedger(t, buf, t0, LedgerOptions{Synced: func() bool { return true }})
	// Issued before the clock was put right: cannot vouch for it.
	if r := begin(t, s, command("cmd-1", t0.Add(-time.Second)), t0); r == nil || r.Status != StatusRejected {
		t.Fatalf("issued before the clock came back: %+v", r)
	}
	if r := begin(t, s, command("cmd-2", t0.Add(time.Second)), t0.Add(2*time.Second)); r != nil {
		t.Fatalf("issued after: %+v, want it run", r)
	}
}

// TestRedeliveredAfterClockStep: a command run, then a restart while the
// clock runs more than a day fast (the ledger must not forget the id: a
// day has not passed), then the clock put right, then the command
// redelivered: it must not run again.
func TestRedeliveredAfterClockStep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	buf := openBuffer(t, path)
	s := openLedger(t, buf, t0, LedgerOptions{})
	x := command("cmd-x", t0)
	if r := begin(t, s, x, t0); r != nil {
		t.Fatalf("the first delivery: %+v, want it run", r)
	}
	finish(t, s, Result{ID: "cmd-x", Status: StatusDone, At: t0})
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	fast := t0.Add(25 * time.Hour) // a minute later in truth
	buf = openBuffer(t, path)
	openLedger(t, buf, fast, LedgerOptions{})
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	right := t0.Add(2 * time.Minute) // NTP stepped the clock back
	buf = openBuffer(t, path)
	s = openLedger(t, buf, right, LedgerOptions{})
	if r := begin(t, s, x, right); r == nil {
		t.Fatal("cmd-x redelivered after the clock came back: nil, it ran a second time")
	}
}

// TestSalvageThenClockBack: a buffer file salvaged (its ids lost) while
// the clock was right, then a restart an hour behind (fake-hwclock's last
// save): a command issued before the salvage must stay refused.
func TestSalvageThenClockBack(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	openLedger(t, buf, t0, LedgerOptions{}) // the record begins at t0
	behind := t0.Add(-time.Hour)
	s := openLedger(t, buf, behind, LedgerOptions{Synced: func() bool { return false }})
	if r := begin(t, s, command("cmd-lost", t0.Add(-30*time.Minute)), behind.Add(time.Minute)); r == nil {
		t.Fatal("a command issued before the record began, with the clock an hour behind: nil, it ran (it may have run before the salvage)")
	}
}

// TestUnsyncedStartSettles: a record begun on a clock not synchronised
// (1970, a salvage at boot) starts at the first synchronised time instead:
// a command issued before it, which may have run before the salvage, is
// refused once NTP has set the clock; one issued after runs.
func TestUnsyncedStartSettles(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	unsynced := LedgerOptions{Synced: func() bool { return false }}
	openLedger(t, buf, time.Unix(90, 0), unsynced) // the record begins in 1970
	openLedger(t, buf, time.Unix(300, 0), unsynced)
	s := openLedger(t, buf, t0, LedgerOptions{}) // NTP has set the clock
	if r := begin(t, s, command("cmd-before", t0.Add(-time.Hour)), t0); r == nil || r.Status != StatusRejected {
		t.Fatalf("issued an hour before the first good time: %+v, want rejected", r)
	}
	if r := begin(t, s, command("cmd-after", t0.Add(time.Second)), t0.Add(time.Second)); r != nil {
		t.Fatalf("issued after: %+v, want it run", r)
	}
}
