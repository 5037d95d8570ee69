package downlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fieldlink/buffer"
)

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

// tenDoneFiveKept opens a ledger that keeps 5 audit entries and runs 10
// commands through it, done: the log keeps entries 17 to 21.
func tenDoneFiveKept(t *testing.T) (*buffer.Buffer, *Ledger) {
	t.Helper()
	buf := openBuffer(t, filepath.Join(t.TempDir(), "buffer.db"))
	s := openLedger(t, buf, t0, LedgerOptions{MaxAuditEntries: 5})
	for i := range 10 {
		c := command(fmt.Sprintf("cmd-%d", i), t0)
		begin(t, s, c, t0)
		finish(t, s, Result{ID: c.ID, Status: StatusDone, At: t0})
	}
	return buf, s
}

// TestAuditBound: the log keeps MaxAuditEntries, the newest, and still
// verifies; the oldest kept is anchored, so deleting it is found.
func TestAuditBound(t *testing.T) {
	buf, s := tenDoneFiveKept(t)
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
