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

// auditChain names one hash-chained log in the aux bucket: where its
// entries and its head are kept.
type auditChain struct {
	prefix, headKey string
	name            string // for a person: "audit log", "refusal log"
}

// The two logs: the audit log of the commands the gateway took up (and
// everything it did with them), and the refusal log of what it refused
// before taking it up and of the replays of what it took up, each with
// its own bound, so that refusals and replays, which anyone who can
// publish may send, never evict a command that ran.
var (
	auditLog   = auditChain{prefix: prefixAudit, headKey: keyAuditHead, name: "audit log"}
	refusalLog = auditChain{prefix: prefixRefused, headKey: keyRefusedHead, name: "refusal log"}
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
	// Refusal marks an entry of the refusal log (its Seq counts that
	// log's entries). Not stored: the log it is kept in says it.
	Refusal bool `json:"-"`
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

// audit adds an entry to b's audit log.
func (b *batch) audit(at time.Time, kind string, cmd *Command, res *Result, note string) {
	b.add(auditLog, &b.head, at, kind, cmd, res, note)
}

// refusal adds a refused command to b's refusal log.
func (b *batch) refusal(at time.Time, cmd *Command, res *Result) {
	b.add(refusalLog, &b.rhead, at, KindRefused, cmd, res, "")
}

// add adds an entry to the log c whose head is h.
func (b *batch) add(c auditChain, h *auditHead, at time.Time, kind string, cmd *Command, res *Result, note string) {
	if res != nil {
		r := *res
		r.At = r.At.UTC()
		res = &r
	}
	full, err := json.Marshal(AuditEntry{Seq: h.Last + 1, At: at.UTC(), Kind: kind, Command: cmd, Result: res, Note: note, Prev: h.Hash})
	if err != nil {
		panic("downlink: marshal an audit entry: " + err.Error())
	}
	// What the hash covers: the entry without its last member, the hash.
	body := append(full[:len(full)-len(emptyHashSuffix)], '}')
	hash := chainHash(h.Hash, body)
	entry := append(body[:len(body)-1:len(body)-1], `,"hash":"`...)
	entry = append(append(entry, hash...), `"}`...)
	h.Last++
	h.Hash = hash
	b.put[c.key(h.Last)] = entry
}

// trim adds to b the deletion of the oldest entries of the log c (head
// h) beyond max (a thousand at a time), moving the head's base to the
// hash before the new oldest.
func (b *batch) trim(c auditChain, h *auditHead, max int) {
	over := int64(h.Last) - int64(h.First) + 1 - int64(max)
	if over <= 0 {
		return
	}
	first := h.First + uint64(min(over, 1000))
	data, ok := b.put[c.key(first)]
	if !ok {
		var err error
		if data, err = b.s.aux.Aux(c.key(first)); err != nil || data == nil {
			return // the next update tries again
		}
	}
	var e AuditEntry
	if json.Unmarshal(data, &e) != nil {
		return
	}
	for seq := h.First; seq < first; seq++ {
		if _, ours := b.put[c.key(seq)]; ours {
			delete(b.put, c.key(seq)) // written and gone in one update
			continue
		}
		b.del = append(b.del, c.key(seq))
	}
	h.First, h.Base = first, e.Prev
}

func (c auditChain) key(seq uint64) string { return fmt.Sprintf("%s%016x", c.prefix, seq) }

func auditKey(seq uint64) string { return auditLog.key(seq) }

// chainHash is the hash of an entry whose JSON without its hash is body,
// after the entry whose hash is prev (hex).
func chainHash(prev string, body []byte) string {
	p, _ := hex.DecodeString(prev) // ours, or checked by verifyAudit
	h := sha256.New()
	h.Write(p)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// loadHead reads the heads of the audit and refusal logs, or starts them.
func (s *Ledger) loadHead() error {
	for _, c := range []struct {
		chain auditChain
		h     *auditHead
	}{{auditLog, &s.head}, {refusalLog, &s.rhead}} {
		h, ok, err := readHead(s.aux, c.chain)
		if err != nil {
			return fmt.Errorf("downlink: open the command ledger: %w", err)
		}
		if !ok {
			h = auditHead{First: 1, Base: zeroHash, Hash: zeroHash}
		}
		*c.h = h
	}
	return nil
}

func readHead(aux AuxReader, c auditChain) (h auditHead, ok bool, err error) {
	raw, err := aux.Aux(c.headKey)
	if err != nil || raw == nil {
		return h, false, err
	}
	if json.Unmarshal(raw, &h) != nil || !isHash(h.Base) || !isHash(h.Hash) {
		return h, false, &AuditError{Log: c.name, Reason: "the log's head is unreadable (edited?)"}
	}
	return h, true, nil
}

func isHash(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 2*sha256.Size
}

// ReadAudit calls fn for every entry of the audit log and the refusal log
// kept in aux, the two merged in order of time (the audit log's first at
// the same time), until fn returns an error. An entry that does not read
// comes as one of kind "unreadable" with the reason in Note. It reads
// only.
func ReadAudit(aux AuxReader, fn func(AuditEntry) error) error {
	var audit, refused []AuditEntry
	for _, c := range []struct {
		chain auditChain
		to    *[]AuditEntry
	}{{auditLog, &audit}, {refusalLog, &refused}} {
		err := aux.ScanAux(c.chain.prefix, func(key string, v []byte) error {
			seq, _ := strconv.ParseUint(strings.TrimPrefix(key, c.chain.prefix), 16, 64)
			var e AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				e = AuditEntry{Seq: seq, Kind: "unreadable", Note: err.Error()}
			}
			e.Refusal = c.chain == refusalLog
			*c.to = append(*c.to, e)
			return nil
		})
		if err != nil {
			return err
		}
	}
	for len(audit) > 0 || len(refused) > 0 {
		var e AuditEntry
		if len(refused) == 0 || len(audit) > 0 && !refused[0].At.Before(audit[0].At) {
			e, audit = audit[0], audit[1:]
		} else {
			e, refused = refused[0], refused[1:]
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// AuditError says where the chain of the audit log or the refusal log
// breaks.
type AuditError struct {
	Log    string // "refusal log"; "" is the audit log
	Seq    uint64 // the first entry that does not check out; 0: the log as a whole
	Reason string
}

func (e *AuditError) Error() string {
	log := e.Log
	if log == "" {
		log = auditLog.name
	}
	if e.Seq == 0 {
		return log + ": " + e.Reason
	}
	return fmt.Sprintf("%s: entry %d: %s", log, e.Seq, e.Reason)
}

// verifyAudit checks the audit log and the refusal log kept in aux (see
// verifyChain).
func verifyAudit(aux AuxReader) error {
	if err := verifyChain(aux, auditLog); err != nil {
		return err
	}
	return verifyChain(aux, refusalLog)
}

// verifyChain checks the log c kept in aux: every entry's hash, every
// link to the entry before, no entry missing in the middle or at either
// end. It returns an *AuditError naming the first entry that breaks the
// chain. It reads only. (Whoever can rewrite the file can rewrite the whole
// chain from an entry on; the log shows edits, it cannot prevent them.)
func verifyChain(aux AuxReader, c auditChain) error {
	h, ok, err := readHead(aux, c)
	if err != nil {
		return err
	}
	var n int
	var next uint64
	prev := ""
	if ok {
		next, prev = h.First, h.Base
	}
	err = aux.ScanAux(c.prefix, func(key string, v []byte) error {
		seq, err := strconv.ParseUint(strings.TrimPrefix(key, c.prefix), 16, 64)
		if err != nil || c.key(seq) != key {
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
		if c != auditLog {
			ae.Log = c.name
		}
		return ae
	}
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	named := func(e *AuditError) error {
		if c != auditLog {
			e.Log = c.name
		}
		return e
	}
	switch {
	case !ok:
		return nil // no log yet
	case next != h.Last+1 && n == 0 && h.Last >= h.First:
		return named(&AuditError{Seq: h.First, Reason: fmt.Sprintf("missing: the head says entries %d to %d are kept, none are (deleted?)", h.First, h.Last)})
	case next != h.Last+1:
		return named(&AuditError{Seq: next, Reason: fmt.Sprintf("missing: the log ends at entry %d, its head says %d (deleted?)", next-1, h.Last)})
	case prev != h.Hash:
		return named(&AuditError{Seq: h.Last, Reason: "its hash is not the one the head holds (edited?)"})
	}
	return nil
}

// String is an entry for a person: seq, time, kind, then what the command
// asked and what became of it.
func (e AuditEntry) String() string {
	var b strings.Builder
	seq := strconv.FormatUint(e.Seq, 10)
	if e.Refusal {
		seq = "r" + seq // the refusal log counts its own
	}
	fmt.Fprintf(&b, "%6s  %s  %-9s", seq, e.At.UTC().Format(time.RFC3339), e.Kind)
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

// AuditSummary is what a check of the audit log and the refusal log
// found.
type AuditSummary struct {
	Entries     int
	First, Last uint64
	// Trimmed is how many of the oldest entries the log's bound removed.
	Trimmed uint64
	// Refusals is the refusal log's.
	Refusals LogSummary
}

// LogSummary is what a check of one log found.
type LogSummary struct {
	Entries              int
	First, Last, Trimmed uint64
}

func (s LogSummary) String() string {
	var b strings.Builder
	if s.Entries == 0 {
		b.WriteString("empty")
	} else {
		fmt.Fprintf(&b, "ok, entries %d to %d (%d), every hash and link checks out", s.First, s.Last, s.Entries)
	}
	if s.Trimmed > 0 {
		fmt.Fprintf(&b, "; %d older entries trimmed (the log keeps the newest; entries 1 to %d are gone)", s.Trimmed, s.Trimmed)
	}
	return b.String()
}

func (s AuditSummary) String() string {
	out := LogSummary{Entries: s.Entries, First: s.First, Last: s.Last, Trimmed: s.Trimmed}.String()
	if r := s.Refusals; r.Entries > 0 || r.Trimmed > 0 {
		out += "; refusal log (commands refused before they were taken up, kept apart): " + r.String()
	}
	return out
}

// CheckAudit verifies the hash chains of the audit log and the refusal
// log (see verifyChain) and counts their entries, and those trimmed.
func CheckAudit(aux AuxReader) (AuditSummary, error) {
	if err := verifyAudit(aux); err != nil {
		return AuditSummary{}, err
	}
	var out [2]LogSummary
	for i, c := range []auditChain{auditLog, refusalLog} {
		h, ok, err := readHead(aux, c)
		if err != nil || !ok {
			if err != nil {
				return AuditSummary{}, err
			}
			continue
		}
		out[i] = LogSummary{First: h.First, Last: h.Last, Trimmed: h.First - 1}
		if h.Last >= h.First {
			out[i].Entries = int(h.Last - h.First + 1)
		}
	}
	a := out[0]
	return AuditSummary{Entries: a.Entries, First: a.First, Last: a.Last, Trimmed: a.Trimmed, Refusals: out[1]}, nil
}
