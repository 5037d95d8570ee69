package downlink

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Audit calls fn for every entry of the audit log, oldest first, until fn
// returns an error.
func (s *Ledger) Audit(fn func(AuditEntry) error) error { return ReadAudit(s.aux, fn) }

// Verify checks the audit log's chain: see verifyAudit.
func (s *Ledger) Verify() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return verifyAudit(s.aux)
}

// AuditEntry is one entry of the audit log, stored as its JSON (which
// json.Marshal gives back byte for byte). Hash is the SHA-256 of the
// previous entry's hash (its 32 bytes; zeros before the first entry ever)
// followed by the entry's JSON without its last member, `,"hash":"…"`;
// Prev is the previous entry's hash. An edited or deleted entry breaks the
// chain at that entry or the next.
type AuditEntry struct {
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	Command *Command  `json:"command,omitempty"`
	Result  *Result   `json:"result,omitempty"`
	Note    string    `json:"note,omitempty"`
	Prev    string    `json:"prev"`
	Hash    string    `json:"hash"`
}

// auditHead, under keyAuditHead, is where the log stands: the oldest entry
// kept and the hash before it, the newest and its hash. It catches entries
// deleted at either end.
type auditHead struct {
	First uint64 `json:"first"` // the oldest entry kept (Last+1 when none)
	Base  string `json:"base"`  // the hash before First
	Last  uint64 `json:"last"`  // the newest entry (0 when none ever)
	Hash  string `json:"hash"`  // its hash (Base when none)
}

var zeroHash = strings.Repeat("0", 2*sha256.Size)

// emptyHashSuffix is how an entry's JSON ends before it has its hash.
const emptyHashSuffix = `,"hash":""}`

// hashSuffixLen is the length of how a stored entry ends: its hash, last.
const hashSuffixLen = len(emptyHashSuffix) + 2*sha256.Size

// audit adds an entry to b.
func (b *batch) audit(at time.Time, kind string, cmd *Command, res *Result, note string) {
	if res != nil {
		r := *res
		r.At = r.At.UTC()
		res = &r
	}
	full, err := json.Marshal(AuditEntry{Seq: b.head.Last + 1, At: at.UTC(), Kind: kind, Command: cmd, Result: res, Note: note, Prev: b.head.Hash})
	if err != nil {
		panic("downlink: marshal an audit entry: " + err.Error())
	}
	// What the hash covers: the entry without its last member, the hash.
	body := append(full[:len(full)-len(emptyHashSuffix)], '}')
	hash := chainHash(b.head.Hash, body)
	entry := append(body[:len(body)-1:len(body)-1], `,"hash":"`...)
	entry = append(append(entry, hash...), `"}`...)
	b.head.Last++
	b.head.Hash = hash
	b.put[auditKey(b.head.Last)] = entry
}

// trim adds to b the deletion of the oldest entries beyond max (a thousand
// at a time), moving the head's base to the hash before the new oldest.
func (b *batch) trim(max int) {
	over := int64(b.head.Last) - int64(b.head.First) + 1 - int64(max)
	if over <= 0 {
		return
	}
	first := b.head.First + uint64(min(over, 1000))
	data, ok := b.put[auditKey(first)]
	if !ok {
		var err error
		if data, err = b.s.aux.Aux(auditKey(first)); err != nil || data == nil {
			return // the next update tries again
		}
	}
	var e AuditEntry
	if json.Unmarshal(data, &e) != nil {
		return
	}
	for seq := b.head.First; seq < first; seq++ {
		if _, ours := b.put[auditKey(seq)]; ours {
			delete(b.put, auditKey(seq)) // written and gone in one update
			continue
		}
		b.del = append(b.del, auditKey(seq))
	}
	b.head.First, b.head.Base = first, e.Prev
}

func auditKey(seq uint64) string { return fmt.Sprintf("%s%016x", prefixAudit, seq) }

// chainHash is the hash of an entry whose JSON without its hash is body,
// after the entry whose hash is prev (hex).
func chainHash(prev string, body []byte) string {
	p, _ := hex.DecodeString(prev) // ours, or checked by verifyAudit
	h := sha256.New()
	h.Write(p)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// loadHead reads the audit head, or starts one.
func (s *Ledger) loadHead() error {
	h, ok, err := readHead(s.aux)
	if err != nil {
		return fmt.Errorf("downlink: open the command ledger: %w", err)
	}
	if !ok {
		h = auditHead{First: 1, Base: zeroHash, Hash: zeroHash}
	}
	s.head = h
	return nil
}

func readHead(aux AuxReader) (h auditHead, ok bool, err error) {
	raw, err := aux.Aux(keyAuditHead)
	if err != nil || raw == nil {
		return h, false, err
	}
	if json.Unmarshal(raw, &h) != nil || !isHash(h.Base) || !isHash(h.Hash) {
		return h, false, &AuditError{Reason: "the log's head is unreadable (edited?)"}
	}
	return h, true, nil
}

func isHash(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 2*sha256.Size
}

// ReadAudit calls fn for every entry of the audit log kept in aux, oldest
// first, until fn returns an error. An entry that does not read comes as
// one of kind "unreadable" with the reason in Note. It reads only.
func ReadAudit(aux AuxReader, fn func(AuditEntry) error) error {
	return aux.ScanAux(prefixAudit, func(key string, v []byte) error {
		seq, _ := strconv.ParseUint(strings.TrimPrefix(key, prefixAudit), 16, 64)
		var e AuditEntry
		if err := json.Unmarshal(v, &e); err != nil {
			e = AuditEntry{Seq: seq, Kind: "unreadable", Note: err.Error()}
		}
		return fn(e)
	})
}

// AuditError says where the audit log's chain breaks.
type AuditError struct {
	Seq    uint64 // the first entry that does not check out; 0: the log as a whole
	Reason string
}

func (e *AuditError) Error() string {
	if e.Seq == 0 {
		return "audit log: " + e.Reason
	}
	return fmt.Sprintf("audit log: entry %d: %s", e.Seq, e.Reason)
}

// verifyAudit checks the audit log kept in aux: every entry's hash, every
// link to the entry before, no entry missing in the middle or at either
// end. It returns an *AuditError naming the first entry that breaks the
// chain. It reads only. (Whoever can rewrite the file can rewrite the whole
// chain from an entry on; the log shows edits, it cannot prevent them.)
func verifyAudit(aux AuxReader) error {
	h, ok, err := readHead(aux)
	if err != nil {
		return err
	}
	var n int
	var next uint64
	prev := ""
	if ok {
		next, prev = h.First, h.Base
	}
	err = aux.ScanAux(prefixAudit, func(key string, v []byte) error {
		seq, err := strconv.ParseUint(strings.TrimPrefix(key, prefixAudit), 16, 64)
		if err != nil || auditKey(seq) != key {
			return &AuditError{Reason: fmt.Sprintf("a stray key %q among the entries", key)}
		}
		if !ok {
			return &AuditError{Seq: seq, Reason: "the log's head is missing (deleted?)"}
		}
		if seq != next {
			if seq > next && n == 0 {
				return &AuditError{Seq: next, Reason: fmt.Sprintf("missing: the log starts at entry %d (deleted?)", seq)}
			}
			if seq > next {
				return &AuditError{Seq: next, Reason: fmt.Sprintf("missing: entry %d follows entry %d (deleted?)", seq, next-1)}
			}
			return &AuditError{Seq: seq, Reason: fmt.Sprintf("kept before the oldest entry, %d", h.First)}
		}
		n++
		var e AuditEntry
		if err := json.Unmarshal(v, &e); err != nil || len(v) < hashSuffixLen || e.Seq != seq {
			return &AuditError{Seq: seq, Reason: "unreadable (edited?)"}
		}
		if e.Prev != prev {
			return &AuditError{Seq: seq, Reason: fmt.Sprintf("does not follow entry %d: its prev is not that entry's hash", seq-1)}
		}
		suffix := v[len(v)-hashSuffixLen:]
		if !bytes.Equal(suffix, []byte(`,"hash":"`+e.Hash+`"}`)) || !isHash(e.Hash) {
			return &AuditError{Seq: seq, Reason: "its hash is not where it belongs (edited?)"}
		}
		body := append(v[:len(v)-hashSuffixLen:len(v)-hashSuffixLen], '}')
		if chainHash(prev, body) != e.Hash {
			return &AuditError{Seq: seq, Reason: "its content does not match its hash (edited)"}
		}
		prev, next = e.Hash, seq+1
		return nil
	})
	var ae *AuditError
	if errors.As(err, &ae) {
		return ae
	}
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	switch {
	case !ok:
		return nil // no log yet
	case next != h.Last+1 && n == 0 && h.Last >= h.First:
		return &AuditError{Seq: h.First, Reason: fmt.Sprintf("missing: the head says entries %d to %d are kept, none are (deleted?)", h.First, h.Last)}
	case next != h.Last+1:
		return &AuditError{Seq: next, Reason: fmt.Sprintf("missing: the log ends at entry %d, its head says %d (deleted?)", next-1, h.Last)}
	case prev != h.Hash:
		return &AuditError{Seq: h.Last, Reason: "its hash is not the one the head holds (edited?)"}
	}
	return nil
}

// String is an entry for a person: seq, time, kind, then what the command
// asked and what became of it.
func (e AuditEntry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6d  %s  %-9s", e.Seq, e.At.UTC().Format(time.RFC3339), e.Kind)
	if c := e.Command; c != nil {
		fmt.Fprintf(&b, "  %s  %s.%s = %s", c.ID, c.Device, c.Point, c.Value)
		if !c.ExpiresAt.IsZero() {
			fmt.Fprintf(&b, "  expires %s", c.ExpiresAt)
		}
		if c.Actor != "" {
			fmt.Fprintf(&b, "  by %s", c.Actor)
		}
		if c.Signature != "" {
			b.WriteString("  signed")
		}
	} else if e.Result != nil && e.Result.ID != "" {
		fmt.Fprintf(&b, "  %s", e.Result.ID)
	}
	if r := e.Result; r != nil {
		fmt.Fprintf(&b, "  → %s", r.Status)
		if r.Reason != "" {
			fmt.Fprintf(&b, ": %s", r.Reason)
		}
		if !r.Readback.IsZero() {
			fmt.Fprintf(&b, "  readback %s", r.Readback)
		}
	}
	if e.Note != "" {
		fmt.Fprintf(&b, "  %s", e.Note)
	}
	return b.String()
}

// AuditSummary is what a check of the audit log found.
type AuditSummary struct {
	Entries     int
	First, Last uint64
}

func (s AuditSummary) String() string {
	if s.Entries == 0 {
		return "empty"
	}
	return fmt.Sprintf("ok, entries %d to %d (%d), every hash and link checks out", s.First, s.Last, s.Entries)
}

// CheckAudit verifies the log's hash chain (see verifyAudit) and counts
// its entries.
func CheckAudit(aux AuxReader) (AuditSummary, error) {
	var s AuditSummary
	err := ReadAudit(aux, func(e AuditEntry) error {
		if s.Entries == 0 {
			s.First = e.Seq
		}
		s.Entries, s.Last = s.Entries+1, e.Seq
		return nil
	})
	if err == nil {
		err = verifyAudit(aux)
	}
	return s, err
}
