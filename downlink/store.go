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
	"sync"
	"time"

	"fieldlink/internal/kclock"
)

// Aux is what the store needs of the buffer file's aux bucket
// (*buffer.Buffer has it): the one file the gateway already writes safely.
type Aux interface {
	AuxReader
	UpdateAux(put map[string][]byte, del []string) error
}

// AuxReader is what reading the audit log needs.
type AuxReader interface {
	Aux(key string) ([]byte, error)
	ScanAux(prefix string, fn func(key string, value []byte) error) error
}

// Defaults of StoreOptions.
const (
	// DefaultKeep is how long a command id is remembered, in time the
	// gateway has seen pass, and the least a store is given: a platform
	// may redeliver within a day.
	DefaultKeep = 24 * time.Hour
	// DefaultMaxAuditEntries is how many audit entries are kept, the
	// newest: a few megabytes of the buffer file.
	DefaultMaxAuditEntries = 20000
)

// StoreOptions tune a Store. The zero value is the defaults.
type StoreOptions struct {
	// Keep is how long an id is remembered after the command arrived (or
	// after its issued_at, if later), counted in elapsed time the store
	// has observed: see Elapsed. Under DefaultKeep means DefaultKeep.
	Keep time.Duration
	// MaxAuditEntries bounds the audit log: the oldest entries go. Zero
	// or less means DefaultMaxAuditEntries.
	MaxAuditEntries int
	// Now is the wall clock for opening (restart recovery, the audit
	// log's times); Begin and Finish are given their times. Nil means
	// time.Now. No duration is measured on it.
	Now func() time.Time
	// Elapsed is a clock that never steps: time since any fixed point of
	// this process. The store adds what it measures on it to the elapsed
	// time kept in the file, and forgets ids by that count alone. Nil
	// means the monotonic clock.
	Elapsed func() time.Duration
	// Synced reports whether the wall clock is true (the kernel's NTP
	// state): only then may the start of the record move back to it. Nil
	// means the kernel's state (false off Linux).
	Synced func() bool
}

func (o StoreOptions) withDefaults() StoreOptions {
	o.Keep = max(o.Keep, DefaultKeep)
	if o.MaxAuditEntries <= 0 {
		o.MaxAuditEntries = DefaultMaxAuditEntries
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Elapsed == nil {
		start := time.Now()
		o.Elapsed = func() time.Duration { return time.Since(start) } // monotonic
	}
	if o.Synced == nil {
		o.Synced = kclock.Synced
	}
	return o
}

// Keys in the aux bucket.
const (
	keySince         = "downlink.since"          // when the id table began: commands issued before may have run
	keySinceUnsynced = "downlink.since-unsynced" // present: keySince was read from a clock not synchronised
	keyForgot        = "downlink.forgot"         // the latest issued_at of a forgotten id: never moves back
	keyElapsed       = "downlink.elapsed"        // the running time the store has observed, in nanoseconds
	prefixID         = "downlink.id/"            // + id: an idRecord
	prefixAudit      = "downlink.audit/"         // + 16 hex digits of seq: an audit entry
	keyAuditHead     = "downlink.audit-head"     // the auditHead
)

// Audit entry kinds.
const (
	KindStart     = "start"     // the log and the id table begin (new or salvaged buffer file)
	KindReceived  = "received"  // a command accepted to run: its id is recorded, the write follows
	KindResult    = "result"    // what became of a command
	KindDuplicate = "duplicate" // a command received again, answered without running it
	KindRefused   = "refused"   // a command refused before Begin (unreadable, badly signed): its id is not recorded
)

// Reasons the store gives.
const (
	ReasonRestarted = "gateway restarted while the command ran"
	reasonRunning   = "a duplicate of a command still running: its result follows"
)

// Store makes commands run at most once: it remembers their ids and
// results durably, in the buffer file, and keeps a hash-chained audit log
// of every command and its outcome. It is safe for concurrent use.
//
// A command that reaches Begin is never run twice: its id is recorded
// before it runs, a duplicate gets the recorded result (or StatusPending),
// and after a restart a command that was running is closed as
// StatusUnknownOutcome, never run again. Ids are forgotten once the
// gateway has run Keep since the command arrived, counted on the monotonic
// clock and kept in the file (time while it is stopped does not count): a
// wall clock stepped forward forgets nothing early. Forgetting an id
// raises a floor, kept in the file, that never moves back: a command
// issued at or before the latest issued_at forgotten is refused, so that
// a forgotten command cannot run again whatever the gateway's clock says.
// A buffer file that is new or was salvaged (salvage does not keep the aux
// bucket) has forgotten everything: commands issued before it began are
// refused too; that start moves back only to a time the kernel says is
// synchronised (a file begun while the clock ran ahead), never on a clock
// that is merely behind.
//
// One Store per buffer file: it keeps the ids in memory as well.
type Store struct {
	aux Aux
	opt StoreOptions

	mu    sync.Mutex
	ids   map[string]*idRecord
	since time.Time
	// sinceUnsynced: since was read from a clock not synchronised.
	sinceUnsynced bool
	forgot        time.Time     // keyForgot; zero while nothing was forgotten
	base          time.Duration // keyElapsed when opened
	e0            time.Duration // opt.Elapsed() when opened
	head          auditHead
}

// idRecord is what the store keeps of a command, under prefixID+id.
type idRecord struct {
	ID       string    `json:"id"`
	Command  *Command  `json:"command,omitempty"` // nil: the record was unreadable
	Received time.Time `json:"received"`
	Result   *Result   `json:"result,omitempty"` // nil while the command runs
	// Seen is the store's elapsed time when the command arrived; records
	// written before it was kept get the elapsed time of the next opening.
	Seen *time.Duration `json:"seen,omitempty"`
}

// forgettable reports whether r may be forgotten at the store's elapsed
// time elapsed: it finished, and the store has run keep since it arrived,
// plus the lead of its issued_at over its arrival (a platform clock
// ahead). One without its command (unreadable) is kept: nothing would
// raise the floor above it.
func (r *idRecord) forgettable(elapsed, keep time.Duration) bool {
	if r.Result == nil || r.Command == nil || r.Seen == nil {
		return false
	}
	lead := max(r.Command.IssuedAt.Time().Sub(r.Received), 0)
	return elapsed-*r.Seen >= keep+lead
}

// OpenStore opens the store kept in aux. Commands that were running when
// the gateway stopped are closed as StatusUnknownOutcome, ids past Keep
// are forgotten, and a new id table starts the audit log with KindStart.
func OpenStore(aux Aux, opt StoreOptions) (*Store, error) {
	s := &Store{aux: aux, opt: opt.withDefaults(), ids: map[string]*idRecord{}}
	now := s.opt.Now().UTC()
	if err := s.loadHead(); err != nil {
		return nil, err
	}
	if err := s.loadClock(); err != nil {
		return nil, err
	}
	elapsed := s.elapsed()
	b := s.newBatch()
	raw, err := aux.Aux(keySince)
	if err != nil {
		return nil, fmt.Errorf("downlink: open the command store: %w", err)
	}
	if err := s.since.UnmarshalText(raw); raw == nil || err != nil {
		s.since = now
		b.put[keySince], _ = now.MarshalText()
		if !s.opt.Synced() {
			// Not to be trusted in either direction: the first
			// synchronised time replaces it (see settleSince).
			s.sinceUnsynced = true
			b.put[keySinceUnsynced] = []byte("1")
		}
		b.audit(now, KindStart, nil, nil, "the command record begins: a new buffer file, or the old one's records were lost (salvage)")
	} else if raw, err = aux.Aux(keySinceUnsynced); err != nil {
		return nil, fmt.Errorf("downlink: open the command store: %w", err)
	} else {
		s.sinceUnsynced = raw != nil
	}
	s.settleSince(b, now)
	err = aux.ScanAux(prefixID, func(key string, v []byte) error {
		id := strings.TrimPrefix(key, prefixID)
		var r idRecord
		if err := json.Unmarshal(v, &r); err != nil || r.ID != id || (r.Result == nil && r.Command == nil) ||
			(r.Result != nil && !r.Result.Status.Final()) {
			// Known, so never run again; what it was is lost.
			r = idRecord{ID: id, Received: now, Result: &Result{ID: id, Status: StatusUnknownOutcome,
				Reason: "the gateway's record of the command is unreadable", At: now}, Seen: &elapsed}
			b.putID(&r)
			b.audit(now, KindResult, nil, r.Result, "")
		}
		if r.Seen == nil { // its age cannot be vouched for: it starts now
			r.Seen = &elapsed
			b.putID(&r)
		}
		if r.Result == nil {
			r.Result = &Result{ID: id, Status: StatusUnknownOutcome, Reason: ReasonRestarted, Value: r.Command.Value, At: now}
			b.putID(&r)
			b.audit(now, KindResult, r.Command, r.Result, "")
		}
		s.ids[id] = &r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("downlink: open the command store: %w", err)
	}
	gone := s.prune(b, "")
	if err := s.commit(b); err != nil {
		return nil, fmt.Errorf("downlink: open the command store: %w", err)
	}
	for _, id := range gone {
		delete(s.ids, id)
	}
	return s, nil
}

// Begin records cmd as running, durably, unless its id is known. It
// returns nil when the command is to run: the caller writes to the device
// only then, and reports with Finish. Otherwise it returns the answer
// without running it: the recorded result of a duplicate (StatusPending
// while the first still runs), or a rejection when the command was issued
// before the store can tell whether it ran (no later than a command it
// has forgotten, or before the buffer file began). On error nothing is recorded and the command
// must not run.
//
// Call it after checking the signature: an id that reached Begin is never
// run again, whoever sent it.
func (s *Store) Begin(cmd Command, now time.Time) (*Result, error) {
	if back, err := ParseCommand(cmd.JSON()); err != nil {
		return nil, fmt.Errorf("downlink: begin: %w", err)
	} else if back != cmd {
		return nil, fmt.Errorf("downlink: begin command %q: it does not read back from its JSON", cmd.ID)
	}
	now = now.UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.newBatch()
	s.settleSince(b, now)
	gone := s.prune(b, cmd.ID)
	rec, known := s.ids[cmd.ID]
	var answer *Result
	switch {
	case known:
		res := rec.answer(now)
		answer = &res
		b.audit(now, KindDuplicate, &cmd, answer, "")
	case s.unvouched(b, cmd) != "":
		answer = &Result{ID: cmd.ID, Status: StatusRejected, Reason: s.unvouched(b, cmd), Value: cmd.Value, At: now}
		rec = &idRecord{ID: cmd.ID, Command: &cmd, Received: now, Result: answer, Seen: ptr(s.elapsed())}
		b.putID(rec)
		b.audit(now, KindResult, &cmd, answer, "")
	default:
		rec = &idRecord{ID: cmd.ID, Command: &cmd, Received: now, Seen: ptr(s.elapsed())}
		b.putID(rec)
		b.audit(now, KindReceived, &cmd, nil, "")
	}
	if err := s.commit(b); err != nil {
		return nil, fmt.Errorf("downlink: begin command %s: %w", cmd.ID, err)
	}
	for _, id := range gone {
		delete(s.ids, id)
	}
	s.ids[cmd.ID] = rec
	if answer != nil {
		a := *answer
		return &a, nil
	}
	return nil, nil
}

// answer is what a duplicate of r's command gets.
func (r *idRecord) answer(now time.Time) Result {
	if r.Result != nil {
		return *r.Result
	}
	return Result{ID: r.ID, Status: StatusPending, Reason: reasonRunning, Value: r.Command.Value, At: now}
}

func ptr[T any](v T) *T { return &v }

// settleSince sets the start of the id table to now, when the kernel says
// the clock is synchronised, if the start is later (the clock was ahead
// when it began: a gateway without a real-time clock, before NTP, and
// every command since would look issued before it) or was read from a
// clock that was not synchronised (it may be behind the truth: 1970, or
// fake-hwclock's hour). Commands received since it began are all
// remembered, so any true time after it began will do; a synchronised now
// is one. A clock that is not synchronised moves nothing.
func (s *Store) settleSince(b *batch, now time.Time) {
	if !s.sinceUnsynced && !now.Before(s.since) {
		return // no need to ask the kernel
	}
	if !s.opt.Synced() {
		return
	}
	b.since = now
	b.put[keySince], _ = now.MarshalText()
	b.del = append(b.del, keySinceUnsynced)
}

// unvouched says why the store cannot vouch that cmd never ran, with b:
// it was issued before the id table began, or no later than a command
// whose id was forgotten. "" when every command issued when it was is
// remembered.
func (s *Store) unvouched(b *batch, cmd Command) string {
	since, forgot := s.since, s.forgot
	if !b.since.IsZero() {
		since = b.since
	}
	if b.forgot.After(forgot) {
		forgot = b.forgot
	}
	issued := cmd.IssuedAt.Time()
	switch {
	case !forgot.IsZero() && !issued.After(forgot):
		return fmt.Sprintf("issued at %s, no later than a command whose id the gateway has forgotten (issued at %s, remembered for %v of running time): too old to tell whether it ran already",
			cmd.IssuedAt, forgot.Format(time.RFC3339), s.opt.Keep)
	case issued.Before(since):
		return fmt.Sprintf("issued at %s, before the gateway's record of commands begins (%s: a new or salvaged buffer file, or a clock set back): cannot tell whether it ran already",
			cmd.IssuedAt, since.Format(time.RFC3339))
	}
	return ""
}

// elapsed is the running time the store has observed: what the file kept
// at opening plus the monotonic time since.
func (s *Store) elapsed() time.Duration { return s.base + s.opt.Elapsed() - s.e0 }

// loadClock reads the elapsed time and the floor of forgotten ids.
func (s *Store) loadClock() error {
	s.e0 = s.opt.Elapsed()
	raw, err := s.aux.Aux(keyElapsed)
	if err != nil {
		return fmt.Errorf("downlink: open the command store: %w", err)
	}
	if raw != nil {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("downlink: open the command store: %s is %q, not a count of nanoseconds", keyElapsed, raw)
		}
		s.base = time.Duration(n)
	}
	if raw, err = s.aux.Aux(keyForgot); err != nil {
		return fmt.Errorf("downlink: open the command store: %w", err)
	}
	if raw != nil {
		if err := s.forgot.UnmarshalText(raw); err != nil {
			// Refuse to open rather than forget the floor: the store
			// could not vouch for any command.
			return fmt.Errorf("downlink: open the command store: %s is %q: %w", keyForgot, raw, err)
		}
	}
	return nil
}

// Finish records the final result of a command that Begin let run, and
// its audit entry. On error the command stays recorded as running: a retry
// may record it; a restart closes it as StatusUnknownOutcome.
func (s *Store) Finish(res Result) error {
	if !res.Status.Final() {
		return fmt.Errorf("downlink: finish command %s: status %q is not a final one", res.ID, res.Status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.ids[res.ID]
	switch {
	case !ok:
		return fmt.Errorf("downlink: finish command %s: it was not begun", res.ID)
	case rec.Result != nil:
		return fmt.Errorf("downlink: finish command %s: already finished (%s)", res.ID, rec.Result.Status)
	}
	if res.At.IsZero() {
		res.At = s.opt.Now()
	}
	res.At = res.At.UTC()
	if res.Value.IsZero() {
		res.Value = rec.Command.Value
	}
	done := *rec
	done.Result = &res
	b := s.newBatch()
	b.putID(&done)
	b.audit(res.At, KindResult, done.Command, &res, "")
	if err := s.commit(b); err != nil {
		return fmt.Errorf("downlink: finish command %s: %w", res.ID, err)
	}
	s.ids[res.ID] = &done
	return nil
}

// Refused adds to the audit log a command refused before Begin: one that
// did not parse (cmd nil; say why in res.Reason) or whose signature did not
// verify. Its id is not recorded, so that a forgery cannot block the real
// command. Whoever can send commands can fill the log with these (the
// oldest entries go first, see MaxAuditEntries): call it for what an
// operator should see.
func (s *Store) Refused(cmd *Command, res Result) error {
	if res.At.IsZero() {
		res.At = s.opt.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.newBatch()
	b.audit(res.At, KindRefused, cmd, &res, "")
	if err := s.commit(b); err != nil {
		return fmt.Errorf("downlink: audit refused command %q: %w", res.ID, err)
	}
	return nil
}

// prune adds to b the deletion of every forgettable id but spare (the one
// being answered), and the floor raised to their latest issued_at, and
// returns them, to forget once b is committed.
func (s *Store) prune(b *batch, spare string) []string {
	var gone []string
	elapsed := s.elapsed()
	for id, r := range s.ids {
		if id != spare && r.forgettable(elapsed, s.opt.Keep) {
			gone = append(gone, id)
			b.del = append(b.del, prefixID+id)
			if at := r.Command.IssuedAt.Time(); at.After(s.forgot) && at.After(b.forgot) {
				b.forgot = at
			}
		}
	}
	if !b.forgot.IsZero() {
		b.put[keyForgot], _ = b.forgot.UTC().MarshalText()
	}
	return gone
}

// Audit calls fn for every entry of the audit log, oldest first, until fn
// returns an error.
func (s *Store) Audit(fn func(AuditEntry) error) error { return ReadAudit(s.aux, fn) }

// Verify checks the audit log's chain: see VerifyAudit.
func (s *Store) Verify() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return VerifyAudit(s.aux)
}

// batch is one update of the aux bucket: records and audit entries that
// are committed together.
type batch struct {
	s      *Store
	put    map[string][]byte
	del    []string
	head   auditHead
	since  time.Time // the id table's new start, if it moves
	forgot time.Time // the floor of forgotten ids, if it rises
}

func (s *Store) newBatch() *batch {
	return &batch{s: s, put: map[string][]byte{}, head: s.head}
}

func (b *batch) putID(r *idRecord) {
	data, err := json.Marshal(r)
	if err != nil {
		panic("downlink: marshal a command record: " + err.Error()) // only strings, times and valid values
	}
	b.put[prefixID+r.ID] = data
}

// commit writes b, then makes its audit head the store's.
func (s *Store) commit(b *batch) error {
	if len(b.put) == 0 && len(b.del) == 0 {
		return nil
	}
	b.trim(s.opt.MaxAuditEntries)
	if b.head != s.head {
		b.put[keyAuditHead], _ = json.Marshal(b.head)
	}
	b.put[keyElapsed] = strconv.AppendInt(nil, int64(s.elapsed()), 10)
	if err := s.aux.UpdateAux(b.put, b.del); err != nil {
		return err
	}
	s.head = b.head
	if !b.since.IsZero() {
		s.since, s.sinceUnsynced = b.since, false
	}
	if !b.forgot.IsZero() {
		s.forgot = b.forgot
	}
	return nil
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

// auditBody is an AuditEntry without its hash: what the hash covers.
type auditBody struct {
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	Command *Command  `json:"command,omitempty"`
	Result  *Result   `json:"result,omitempty"`
	Note    string    `json:"note,omitempty"`
	Prev    string    `json:"prev"`
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

// hashSuffixLen is the length of how a stored entry ends: its hash, last.
const hashSuffixLen = len(`,"hash":""}`) + 2*sha256.Size

// audit adds an entry to b.
func (b *batch) audit(at time.Time, kind string, cmd *Command, res *Result, note string) {
	if res != nil {
		r := *res
		r.At = r.At.UTC()
		res = &r
	}
	body, err := json.Marshal(auditBody{Seq: b.head.Last + 1, At: at.UTC(), Kind: kind, Command: cmd, Result: res, Note: note, Prev: b.head.Hash})
	if err != nil {
		panic("downlink: marshal an audit entry: " + err.Error())
	}
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
	p, _ := hex.DecodeString(prev) // ours, or checked by VerifyAudit
	h := sha256.New()
	h.Write(p)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// loadHead reads the audit head, or starts one.
func (s *Store) loadHead() error {
	h, ok, err := readHead(s.aux)
	if err != nil {
		return fmt.Errorf("downlink: open the command store: %w", err)
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

// VerifyAudit checks the audit log kept in aux: every entry's hash, every
// link to the entry before, no entry missing in the middle or at either
// end. It returns an *AuditError naming the first entry that breaks the
// chain. It reads only. (Whoever can rewrite the file can rewrite the whole
// chain from an entry on; the log shows edits, it cannot prevent them.)
func VerifyAudit(aux AuxReader) error {
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

// CheckAudit verifies the log's hash chain (see VerifyAudit) and counts
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
		err = VerifyAudit(aux)
	}
	return s, err
}
