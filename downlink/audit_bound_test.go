package downlink

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Refusals of what anyone who can publish may send (unreadable, unsigned,
// badly signed) are bounded apart from the commands that ran: any number
// of them leaves every entry of a command that ran in the log, and the
// chain verifies.
func TestRefusalsDoNotEvictCommands(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	s := openLedger(t, buf, t0, LedgerOptions{MaxAuditEntries: 10})
	c := command("real-1", t0)
	begin(t, s, c, t0)
	finish(t, s, Result{ID: c.ID, Status: StatusDone, At: t0})
	forged := command("forged", t0)
	for i := range 200 {
		var cmd *Command
		if i%2 == 0 {
			cmd = &forged
		}
		if err := s.Refused(cmd, Result{ID: "forged", Status: StatusRejected, Reason: "command forged: signature does not verify", At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	got := kinds(entries(t, buf))
	for _, want := range []string{"received real-1", "result real-1 done"} {
		if !slices.Contains(got, want) {
			t.Fatalf("%q evicted by 200 refusals; the log holds %d entries: %v…", want, len(got), got[:min(len(got), 5)])
		}
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	// The refusal log keeps its newest 2,000 at most, says what it
	// trimmed, and is chained like the audit log: a deleted entry is found.
	s2 := openLedger(t, buf, t0, LedgerOptions{MaxAuditEntries: 10, MaxRefusedEntries: 50})
	if err := s2.Refused(nil, Result{Status: StatusRejected, Reason: "command: not JSON", At: t0}); err != nil {
		t.Fatal(err)
	}
	sum, err := CheckAudit(buf)
	if err != nil || sum.Refusals.Entries != 50 || sum.Refusals.Trimmed != 151 || sum.Entries != 3 || sum.Trimmed != 0 ||
		!strings.Contains(sum.String(), "refusal log (commands refused before they were taken up, kept apart): ok, entries 152 to 201 (50), every hash and link checks out; 151 older entries trimmed") {
		t.Fatalf("CheckAudit: %v %+v %s", err, sum, sum)
	}
	deleteAux(t, buf, refusalLog.key(160))
	if err := s2.Verify(); err == nil || !strings.Contains(err.Error(), "refusal log: entry 160: missing") {
		t.Fatalf("a refusal deleted: %v", err)
	}
}

// gateway audit -verify says how many entries were trimmed by the bound,
// and the chain of what is left verifies.
func TestAuditVerifySaysTrimmed(t *testing.T) {
	buf, _ := tenDoneFiveKept(t)
	sum, err := CheckAudit(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := sum.String(); !strings.Contains(got, "entries 17 to 21 (5)") || !strings.Contains(got, "16 older entries trimmed") {
		t.Fatalf("CheckAudit: %q, want entries 17 to 21 and 16 older entries trimmed", got)
	}
}

// A signed command replayed (anyone who saw it may publish it again, as
// often as they like, until it expires) is answered from its first result
// and noted in the refusal log, not the audit log: replays never evict
// the entries of commands that ran.
func TestReplaysDoNotEvictCommands(t *testing.T) {
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	s := openLedger(t, buf, t0, LedgerOptions{MaxAuditEntries: 10})
	c := command("real-1", t0)
	begin(t, s, c, t0)
	finish(t, s, Result{ID: c.ID, Status: StatusDone, At: t0})
	for range 50 {
		res, err := s.Begin(c, t0)
		if err != nil || res == nil || res.Status != StatusDone {
			t.Fatalf("replay: %+v %v, want the first result", res, err)
		}
	}
	got := kinds(entries(t, buf))
	for _, want := range []string{"received real-1", "result real-1 done"} {
		if !slices.Contains(got, want) {
			t.Fatalf("%q evicted by 50 replays; the log holds %d entries: %v…", want, len(got), got[:min(len(got), 5)])
		}
	}
	sum, err := CheckAudit(buf)
	if err != nil || sum.Refusals.Entries != 50 {
		t.Fatalf("CheckAudit: %v %+v, want the 50 replays in the refusal log", err, sum)
	}
}
