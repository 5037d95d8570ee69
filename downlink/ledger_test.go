package downlink

import (
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
		"not readable": second(s.Begin(Command{ID: "cmd-4", Device: "d", Point: "p", Value: Value{text: "4x"}, IssuedAt: NewTimestamp(t0)}, t0)),
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

// TestRefused: a command refused before Begin is in the refusal log, and
// its id is not taken: the real command runs.
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
	// At the same time, the audit log's entries come first.
	es := entries(t, buf)
	if got := strings.Join(kinds(es), "|"); got != "start|received cmd-1|refused cmd-1 rejected|refused  rejected" {
		t.Fatalf("audit log: %s", got)
	}
	if es[1].Refusal || !es[2].Refusal || !strings.HasPrefix(strings.TrimSpace(es[2].String()), "r1 ") {
		t.Fatalf("the refusals are not told from the audit log's entries: %q, %q", es[1], es[2])
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
