package downlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/buffer"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// openBuffer opens the buffer file at path; the test closes it at the end
// (Close may come earlier: it is idempotent).
func openBuffer(t testing.TB, path string) *buffer.Buffer {
	t.Helper()
	b, err := buffer.Open(path, buffer.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func openLedger(t testing.TB, aux Aux, now time.Time, opt LedgerOptions) *Ledger {
	t.Helper()
	opt.Now = func() time.Time { return now }
	if opt.Synced == nil {
		opt.Synced = func() bool { return true } // not the test machine's
	}
	s, err := OpenLedger(aux, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// command returns a valid command issued at issued.
func command(id string, issued time.Time) Command {
	return Command{ID: id, Device: "valve-1", Point: "Setpoint", Value: Number(42.5),
		IssuedAt: NewTimestamp(issued), ExpiresAt: NewTimestamp(issued.Add(5 * time.Minute)), Actor: "ops:alice"}
}

func begin(t testing.TB, s *Ledger, c Command, now time.Time) *Result {
	t.Helper()
	r, err := s.Begin(c, now)
	if err != nil {
		t.Fatalf("Begin %s: %v", c.ID, err)
	}
	return r
}

func finish(t testing.TB, s *Ledger, r Result) {
	t.Helper()
	if err := s.Finish(r); err != nil {
		t.Fatalf("Finish %s: %v", r.ID, err)
	}
}

// entries returns the audit log.
func entries(t testing.TB, aux AuxReader) []AuditEntry {
	t.Helper()
	var es []AuditEntry
	if err := ReadAudit(aux, func(e AuditEntry) error { es = append(es, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return es
}

// kinds returns "kind id status" of every entry.
func kinds(es []AuditEntry) []string {
	var out []string
	for _, e := range es {
		s := e.Kind
		if e.Command != nil {
			s += " " + e.Command.ID
		} else if e.Result != nil {
			s += " " + e.Result.ID
		}
		if e.Result != nil {
			s += " " + string(e.Result.Status)
		}
		out = append(out, s)
	}
	return out
}

// consistent fails the test unless the ids the ledger holds in memory are
// those it keeps in the file.
func consistent(t testing.TB, s *Ledger, aux AuxReader) {
	t.Helper()
	onDisk := map[string]bool{}
	if err := aux.ScanAux(prefixID, func(k string, _ []byte) error { onDisk[strings.TrimPrefix(k, prefixID)] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.ids {
		if !onDisk[id] {
			t.Errorf("id %s in memory, not in the file", id)
		}
	}
	for id := range onDisk {
		if _, ok := s.ids[id]; !ok {
			t.Errorf("id %s in the file, not in memory", id)
		}
	}
}

func TestBeginFinishDuplicate(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	s := openLedger(t, buf, t0, LedgerOptions{})
	c := command("cmd-1", t0)
	if r := begin(t, s, c, t0.Add(time.Second)); r != nil {
		t.Fatalf("a new command: %+v, want nil (run it)", r)
	}
	// A duplicate while it runs: not run, told so.
	r := begin(t, s, c, t0.Add(2*time.Second))
	if r == nil || r.Status != StatusPending || r.Status.Final() || r.ID != "cmd-1" || !strings.Contains(r.Reason, "still running") {
		t.Fatalf("a duplicate while running: %+v", r)
	}
	finish(t, s, Result{ID: "cmd-1", Status: StatusDone, Readback: Number(42.5), At: t0.Add(3 * time.Second)})
	done := Result{ID: "cmd-1", Status: StatusDone, Value: c.Value, Readback: Number(42.5), At: t0.Add(3 * time.Second)} // the value filled in
	// A duplicate afterwards gets the first result, as it was.
	r = begin(t, s, c, t0.Add(time.Minute))
	if r == nil || string(r.JSON()) != string(done.JSON()) {
		t.Fatalf("a duplicate after the result: %+v, want %s", r, done.JSON())
	}
	// A duplicate with other fields is still a duplicate: the id decides.
	other := c
	other.Value = Number(99)
	if r := begin(t, s, other, t0.Add(time.Minute)); r == nil || r.Status != StatusDone {
		t.Fatalf("same id, other value: %+v", r)
	}
	for name, err := range map[string]error{
		"twice":        s.Finish(done),
		"never begun":  s.Finish(Result{ID: "cmd-2", Status: StatusDone, At: t0}),
		"not final":    s.Finish(Result{ID: "cmd-1", Status: StatusPending, At: t0}),
		"invalid":      second(s.Begin(Command{ID: "cmd/3"}, t0)),
		"not readable": second(s.Begin(Command{ID: "cmd-4", Device: "d", Point: "p", Value: Value{"4x"}, IssuedAt: NewTimestamp(t0)}, t0)),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	want := []string{"start", "received cmd-1", "duplicate cmd-1 pending", "result cmd-1 done", "duplicate cmd-1 done", "duplicate cmd-1 done"}
	if got := kinds(entries(t, buf)); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("audit log:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

func second[T any](_ T, err error) error { return err }

// TestRestartClosesRunningCommands: a command begun and not finished
// before a restart is never run again; it is closed as unknown_outcome.
func TestRestartClosesRunningCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	buf := openBuffer(t, path)
	s := openLedger(t, buf, t0, LedgerOptions{})
	a, b := command("cmd-a", t0), command("cmd-b", t0)
	begin(t, s, a, t0)
	begin(t, s, b, t0)
	finish(t, s, Result{ID: "cmd-b", Status: StatusFailed, Reason: "slave 3: timeout", Value: b.Value, At: t0.Add(time.Second)})
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}

	buf = openBuffer(t, path)
	s = openLedger(t, buf, t0.Add(time.Minute), LedgerOptions{})
	r := begin(t, s, a, t0.Add(2*time.Minute))
	if r == nil || r.Status != StatusUnknownOutcome || r.Reason != reasonRestarted || !r.At.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the command running at the restart: %+v", r)
	}
	if r := begin(t, s, b, t0.Add(2*time.Minute)); r == nil || r.Status != StatusFailed || r.Reason != "slave 3: timeout" {
		t.Fatalf("the finished one: %+v", r)
	}
	if err := s.Finish(Result{ID: "cmd-a", Status: StatusDone, At: t0}); err == nil {
		t.Fatal("Finish of a command closed at the restart")
	}
	want := "start|received cmd-a|received cmd-b|result cmd-b failed|result cmd-a unknown_outcome|duplicate cmd-a unknown_outcome|duplicate cmd-b failed"
	if got := strings.Join(kinds(entries(t, buf)), "|"); got != want {
		t.Fatalf("audit log: %s\nwant %s", got, want)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	consistent(t, s, buf)
	// A third opening changes nothing more.
	n := len(entries(t, buf))
	openLedger(t, buf, t0.Add(3*time.Minute), LedgerOptions{})
	if len(entries(t, buf)) != n {
		t.Fatal("reopening the ledger wrote audit entries again")
	}
}

const (
	storeChildEnv = "FIELDLINK_DOWNLINK_STORE_CHILD"
)

// TestStoreCrashChild is the child of TestBeginIsDurable: it begins a
// command, says so, and waits to be killed.
func TestStoreCrashChild(t *testing.T) {
	path := os.Getenv(storeChildEnv)
	if path == "" {
		t.Skip("the child of TestBeginIsDurable")
	}
	buf, err := buffer.Open(path, buffer.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	s, err := OpenLedger(buf, LedgerOptions{Now: func() time.Time { return t0 }})
	if err == nil {
		_, err = s.Begin(command("cmd-k", t0), t0)
	}
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	fmt.Println("begun")
	select {}
}

// TestBeginIsDurable kills a process with SIGKILL right after Begin
// returned: the next process knows the command, as unknown_outcome.
func TestBeginIsDurable(t *testing.T) {
	if os.Getenv(storeChildEnv) != "" {
		t.Skip("in the child")
	}
	path := filepath.Join(t.TempDir(), "buffer.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), storeChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 6)
	_, err = io.ReadFull(out, line)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil || string(line) != "begun\n" {
		t.Fatalf("the child said %q (%v)", line, err)
	}
	buf := openBuffer(t, path)
	s := openLedger(t, buf, t0.Add(time.Minute), LedgerOptions{})
	if r := begin(t, s, command("cmd-k", t0), t0.Add(time.Minute)); r == nil || r.Status != StatusUnknownOutcome {
		t.Fatalf("after the kill: %+v, want unknown_outcome", r)
	}
}

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

// failingAux is the buffer with updates that fail while fail is set.
type failingAux struct {
	*buffer.Buffer
	fail atomic.Bool
}

func (f *failingAux) UpdateAux(put map[string][]byte, del []string) error {
	if f.fail.Load() {
		return errors.New("disk full")
	}
	return f.Buffer.UpdateAux(put, del)
}

// TestBeginFailsSafely: a Begin that could not record the id says so and
// leaves nothing behind; the command may come again.
func TestBeginFailsSafely(t *testing.T) {
	aux := &failingAux{Buffer: openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))}
	s := openLedger(t, aux, t0, LedgerOptions{})
	aux.fail.Store(true)
	c := command("cmd-1", t0)
	if _, err := s.Begin(c, t0); err == nil || !strings.Contains(err.Error(), "cmd-1") {
		t.Fatalf("Begin on a failing file: %v", err)
	}
	aux.fail.Store(false)
	if r := begin(t, s, c, t0); r != nil {
		t.Fatalf("after the failure: %+v, want it run", r)
	}
	aux.fail.Store(true)
	if err := s.Finish(Result{ID: "cmd-1", Status: StatusDone, At: t0}); err == nil {
		t.Fatal("Finish on a failing file succeeded")
	}
	aux.fail.Store(false)
	if r := begin(t, s, c, t0); r == nil || r.Status != StatusPending {
		t.Fatalf("after a failed Finish: %+v, want still running", r)
	}
	finish(t, s, Result{ID: "cmd-1", Status: StatusDone, At: t0})
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestBeginOnce: of many concurrent deliveries of one command, one runs.
func TestBeginOnce(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	s := openLedger(t, buf, t0, LedgerOptions{})
	var ran atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r, err := s.Begin(command("cmd-1", t0), t0)
			if err != nil {
				t.Error(err)
			}
			if r == nil {
				ran.Add(1)
			}
		})
	}
	wg.Wait()
	if ran.Load() != 1 {
		t.Fatalf("%d of 8 deliveries ran", ran.Load())
	}
}

// auditFixture writes a ledger with commands 1 to 4 run and returns the
// buffer and its path.
func auditFixture(t *testing.T) (*buffer.Buffer, string) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	buf := openBuffer(t, path)
	s := openLedger(t, buf, t0, LedgerOptions{})
	for i := 1; i <= 4; i++ {
		c := command(fmt.Sprintf("cmd-%d", i), t0)
		c.Actor = fmt.Sprintf("ops:marker-%d", i)
		begin(t, s, c, t0)
		finish(t, s, Result{ID: c.ID, Status: StatusDone, At: t0})
	}
	// 1 start, then received and result for each: entries 2i and 2i+1.
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	return buf, path
}

func TestAuditLog(t *testing.T) {
	buf, _ := auditFixture(t)
	es := entries(t, buf)
	if len(es) != 9 {
		t.Fatalf("%d entries, want 9", len(es))
	}
	prev := zeroHash
	for i, e := range es {
		if e.Seq != uint64(i+1) || e.Prev != prev || !isHash(e.Hash) || !e.At.Equal(t0) {
			t.Fatalf("entry %d: %+v", i+1, e)
		}
		prev = e.Hash
	}
	if e := es[2]; e.Kind != KindResult || e.Command == nil || e.Command.Actor != "ops:marker-1" || e.Result.Status != StatusDone {
		t.Fatalf("entry 3: %+v", e)
	}
	// An entry marshals back to the bytes stored: the JSON that gateway
	// audit -json prints is what the hashes cover.
	for _, e := range es {
		stored, _ := buf.Aux(auditKey(e.Seq))
		if again, err := json.Marshal(e); err != nil || string(again) != string(stored) {
			t.Fatalf("entry %d marshals to\n%s\nstored as\n%s", e.Seq, again, stored)
		}
	}
	// Reading stops at fn's error.
	stop, n := errors.New("stop"), 0
	if err := ReadAudit(buf, func(AuditEntry) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("ReadAudit with a failing fn: %v after %d", err, n)
	}
}

// TestAuditDetectsTampering: an entry edited in the file, or deleted in the
// middle or at either end, or rewritten with a fresh hash, is found, and
// the first broken entry is named.
func TestAuditDetectsTampering(t *testing.T) {
	for _, c := range []struct {
		name   string
		tamper func(t *testing.T, buf *buffer.Buffer, path string) *buffer.Buffer
		seq    uint64
		reason string
	}{
		{"edit in the file", func(t *testing.T, buf *buffer.Buffer, path string) *buffer.Buffer {
			buf.Close()
			editFile(t, path, "ops:marker-2", "ops:marker-X") // entries 4 and 5, and cmd-2's record
			return openBuffer(t, path)
		}, 4, "content does not match its hash"},
		{"delete in the middle", func(t *testing.T, buf *buffer.Buffer, _ string) *buffer.Buffer {
			deleteAux(t, buf, auditKey(6))
			return buf
		}, 6, "missing: entry 7 follows entry 5"},
		{"delete the newest", func(t *testing.T, buf *buffer.Buffer, _ string) *buffer.Buffer {
			deleteAux(t, buf, auditKey(9))
			return buf
		}, 9, "the log ends at entry 8, its head says 9"},
		{"delete the oldest", func(t *testing.T, buf *buffer.Buffer, _ string) *buffer.Buffer {
			deleteAux(t, buf, auditKey(1))
			return buf
		}, 1, "the log starts at entry 2"},
		{"delete every entry", func(t *testing.T, buf *buffer.Buffer, _ string) *buffer.Buffer {
			var keys []string
			_ = buf.ScanAux(prefixAudit, func(k string, _ []byte) error { keys = append(keys, k); return nil })
			deleteAux(t, buf, keys...)
			return buf
		}, 1, "none are"},
		{"delete the head", func(t *testing.T, buf *buffer.Buffer, _ string) *buffer.Buffer {
			deleteAux(t, buf, keyAuditHead)
			return buf
		}, 1, "head is missing"},
		{"rewrite with a fresh hash", func(t *testing.T, buf *buffer.Buffer, _ string) *buffer.Buffer {
			old, _ := buf.Aux(auditKey(5))
			var e AuditEntry
			if err := json.Unmarshal(old, &e); err != nil {
				t.Fatal(err)
			}
			e.Result.Status = StatusFailed
			b := &batch{put: map[string][]byte{}, head: auditHead{Last: 4, Hash: e.Prev}}
			b.audit(e.At, e.Kind, e.Command, e.Result, "")
			if err := buf.PutAux(auditKey(5), b.put[auditKey(5)]); err != nil {
				t.Fatal(err)
			}
			if err := verifyAudit(buf); err == nil || err.(*AuditError).Seq != 6 {
				t.Fatalf("the forged entry itself must check out, the next must not: %v", err)
			}
			return buf
		}, 6, "does not follow entry 5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			buf, path := auditFixture(t)
			buf = c.tamper(t, buf, path)
			err := verifyAudit(buf)
			var ae *AuditError
			if !errors.As(err, &ae) || ae.Seq != c.seq || !strings.Contains(ae.Error(), c.reason) {
				t.Fatalf("Verify: %v, want entry %d: %q", err, c.seq, c.reason)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("entry %d", c.seq)) {
				t.Fatalf("the error does not name the entry: %v", err)
			}
		})
	}
}

func deleteAux(t *testing.T, buf *buffer.Buffer, keys ...string) {
	t.Helper()
	if err := buf.DeleteAux(keys...); err != nil {
		t.Fatal(err)
	}
}

// editFile replaces every copy of old in the closed file at path with new,
// of the same length (bbolt's stale copies included).
func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%q not in %s", old, path)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(data, []byte(old), []byte(new)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAuditBound: the log keeps MaxAuditEntries, the newest, and still
// verifies; the oldest kept is anchored, so deleting it is found.
func TestAuditBound(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	s := openLedger(t, buf, t0, LedgerOptions{MaxAuditEntries: 5})
	for i := range 10 {
		c := command(fmt.Sprintf("cmd-%d", i), t0)
		begin(t, s, c, t0)
		finish(t, s, Result{ID: c.ID, Status: StatusDone, At: t0})
	}
	es := entries(t, buf)
	if len(es) != 5 || es[0].Seq != 17 || es[4].Seq != 21 {
		t.Fatalf("%d entries, %d to %d; want the newest 5, 17 to 21", len(es), es[0].Seq, es[len(es)-1].Seq)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	deleteAux(t, buf, auditKey(17))
	if err := s.Verify(); err == nil || err.(*AuditError).Seq != 17 {
		t.Fatalf("the oldest kept entry deleted: %v", err)
	}
	// One entry kept: written and trimmed in the same update.
	s1 := openLedger(t, openBuffer(t, filepath.Join(t.TempDir(), "b1.db")), t0, LedgerOptions{MaxAuditEntries: 1})
	begin(t, s1, command("cmd-1", t0), t0)
	if err := s1.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestRefused: a command refused before Begin is in the audit log, and its
// id is not taken: the real command runs.
func TestRefused(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	s := openLedger(t, buf, t0, LedgerOptions{})
	forged := command("cmd-1", t0)
	forged.Value = Number(100)
	if err := s.Refused(&forged, Result{ID: "cmd-1", Status: StatusRejected, Reason: "signature does not verify", At: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.Refused(nil, Result{Status: StatusRejected, Reason: "command: not JSON", At: t0}); err != nil {
		t.Fatal(err)
	}
	if r := begin(t, s, command("cmd-1", t0), t0); r != nil {
		t.Fatalf("the real command after a forgery with its id: %+v, want it run", r)
	}
	if got := strings.Join(kinds(entries(t, buf)), "|"); got != "start|refused cmd-1 rejected|refused  rejected|received cmd-1" {
		t.Fatalf("audit log: %s", got)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	consistent(t, s, buf)
}

// TestUnreadableRecord: an id record that does not read is kept as known
// (never run again) with an unknown outcome.
func TestUnreadableRecord(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	openLedger(t, buf, t0, LedgerOptions{})
	if err := buf.PutAux(prefixID+"cmd-1", []byte("{garbage")); err != nil {
		t.Fatal(err)
	}
	s := openLedger(t, buf, t0, LedgerOptions{})
	if r := begin(t, s, command("cmd-1", t0), t0); r == nil || r.Status != StatusUnknownOutcome || !strings.Contains(r.Reason, "unreadable") {
		t.Fatalf("a command whose record was unreadable: %+v", r)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
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
