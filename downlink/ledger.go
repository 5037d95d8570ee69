package downlink

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"fieldlink/internal/kclock"
)

// Aux is what the ledger needs of the buffer file's aux bucket
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

// Defaults of StoreOptions (its fields say them).
const (
	// defaultKeep is how long a command id is remembered, in time the
	// gateway has seen pass, and the least a ledger is given: a platform
	// may redeliver within a day.
	defaultKeep = 24 * time.Hour
	// defaultMaxAuditEntries is how many audit entries are kept, the
	// newest: a few megabytes of the buffer file.
	defaultMaxAuditEntries = 20000
	// defaultMaxRefusedEntries is how many entries the refusal log keeps,
	// the newest.
	defaultMaxRefusedEntries = 2000
)

// LedgerOptions tune a Ledger. The zero value is the defaults.
type LedgerOptions struct {
	// Keep is how long an id is remembered after the command arrived (or
	// after its issued_at, if later), counted in elapsed time the ledger
	// has observed: see Elapsed. Under 24 hours (a day, within which a
	// platform may redeliver) means 24 hours.
	Keep time.Duration
	// MaxAuditEntries bounds the audit log: the oldest entries go. Zero
	// or less means 20,000 (a few megabytes of the buffer file).
	MaxAuditEntries int
	// MaxRefusedEntries bounds the refusal log, apart: what anyone who
	// can publish may send (see Refused) evicts only refusals. Zero or
	// less means 2,000.
	MaxRefusedEntries int
	// Now is the wall clock for opening (restart recovery, the audit
	// log's times); Begin and Finish are given their times. Nil means
	// time.Now. No duration is measured on it.
	Now func() time.Time
	// Elapsed is a clock that never steps: time since any fixed point of
	// this process. The ledger adds what it measures on it to the elapsed
	// time kept in the file, and forgets ids by that count alone. Nil
	// means the monotonic clock.
	Elapsed func() time.Duration
	// Synced reports whether the wall clock is true (the kernel's NTP
	// state): only then may the start of the record move back to it. Nil
	// means the kernel's state (false off Linux).
	Synced func() bool
}

func (o LedgerOptions) withDefaults() LedgerOptions {
	o.Keep = max(o.Keep, defaultKeep)
	if o.MaxAuditEntries <= 0 {
		o.MaxAuditEntries = defaultMaxAuditEntries
	}
	if o.MaxRefusedEntries <= 0 {
		o.MaxRefusedEntries = defaultMaxRefusedEntries
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
	keyElapsed       = "downlink.elapsed"        // the running time the ledger has observed, in nanoseconds
	prefixID         = "downlink.id/"            // + id: an idRecord
	prefixAudit      = "downlink.audit/"         // + 16 hex digits of seq: an audit entry
	keyAuditHead     = "downlink.audit-head"     // the auditHead
	prefixRefused    = "downlink.refused/"       // + 16 hex digits of seq: an entry of the refusal log
	keyRefusedHead   = "downlink.refused-head"   // the refusal log's auditHead
)

// Audit entry kinds.
const (
	KindStart     = "start"     // the log and the id table begin (new or salvaged buffer file)
	KindReceived  = "received"  // a command accepted to run: its id is recorded, the write follows
	KindResult    = "result"    // what became of a command
	KindDuplicate = "duplicate" // a command received again, answered without running it (in the refusal log)
	KindRefused   = "refused"   // a command refused before Begin (unreadable, badly signed): its id is not recorded
)

// Reasons the ledger gives.
const (
	reasonRestarted = "gateway restarted while the command ran"
	reasonRunning   = "a duplicate of a command still running: its result follows"
)

// Ledger makes commands run at most once: it remembers their ids and
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
// One Ledger per buffer file: it keeps the ids in memory as well.
type Ledger struct {
	aux Aux
	opt LedgerOptions

	mu    sync.Mutex
	ids   map[string]*idRecord
	since time.Time
	// sinceUnsynced: since was read from a clock not synchronised.
	sinceUnsynced bool
	forgot        time.Time     // keyForgot; zero while nothing was forgotten
	base          time.Duration // keyElapsed when opened
	e0            time.Duration // opt.Elapsed() when opened
	head          auditHead     // the audit log's
	rhead         auditHead     // the refusal log's
}

// idRecord is what the ledger keeps of a command, under prefixID+id.
type idRecord struct {
	ID       string    `json:"id"`
	Command  *Command  `json:"command,omitempty"` // nil: the record was unreadable
	Received time.Time `json:"received"`
	Result   *Result   `json:"result,omitempty"` // nil while the command runs
	// Seen is the ledger's elapsed time when the command arrived; records
	// written before it was kept get the elapsed time of the next opening.
	Seen *time.Duration `json:"seen,omitempty"`
}

// forgettable reports whether r may be forgotten at the ledger's elapsed
// time elapsed: it finished, and the ledger has run keep since it arrived,
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

// OpenLedger opens the ledger kept in aux. Commands that were running when
// the gateway stopped are closed as StatusUnknownOutcome, ids past Keep
// are forgotten, and a new id table starts the audit log with KindStart.
func OpenLedger(aux Aux, opt LedgerOptions) (*Ledger, error) {
	s := &Ledger{aux: aux, opt: opt.withDefaults(), ids: map[string]*idRecord{}}
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
		return nil, fmt.Errorf("downlink: open the command ledger: %w", err)
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
		return nil, fmt.Errorf("downlink: open the command ledger: %w", err)
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
			r.Result = &Result{ID: id, Status: StatusUnknownOutcome, Reason: reasonRestarted, Value: r.Command.Value, At: now}
			b.putID(&r)
			b.audit(now, KindResult, r.Command, r.Result, "")
		}
		s.ids[id] = &r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("downlink: open the command ledger: %w", err)
	}
	gone := s.prune(b, "")
	if err := s.commit(b); err != nil {
		return nil, fmt.Errorf("downlink: open the command ledger: %w", err)
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
// before the ledger can tell whether it ran (no later than a command it
// has forgotten, or before the buffer file began). On error nothing is recorded and the command
// must not run.
//
// Call it after checking the signature: an id that reached Begin is never
// run again, whoever sent it.
func (s *Ledger) Begin(cmd Command, now time.Time) (*Result, error) {
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
		// Anyone who saw a signed command can publish it again: its
		// replays are bounded with the refusals, never evicting what ran.
		b.add(refusalLog, &b.rhead, now, KindDuplicate, &cmd, answer, "")
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
func (s *Ledger) settleSince(b *batch, now time.Time) {
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

// unvouched says why the ledger cannot vouch that cmd never ran, with b:
// it was issued before the id table began, or no later than a command
// whose id was forgotten. "" when every command issued when it was is
// remembered.
func (s *Ledger) unvouched(b *batch, cmd Command) string {
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

// elapsed is the running time the ledger has observed: what the file kept
// at opening plus the monotonic time since.
func (s *Ledger) elapsed() time.Duration { return s.base + s.opt.Elapsed() - s.e0 }

// loadClock reads the elapsed time and the floor of forgotten ids.
func (s *Ledger) loadClock() error {
	s.e0 = s.opt.Elapsed()
	raw, err := s.aux.Aux(keyElapsed)
	if err != nil {
		return fmt.Errorf("downlink: open the command ledger: %w", err)
	}
	if raw != nil {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("downlink: open the command ledger: %s is %q, not a count of nanoseconds", keyElapsed, raw)
		}
		s.base = time.Duration(n)
	}
	if raw, err = s.aux.Aux(keyForgot); err != nil {
		return fmt.Errorf("downlink: open the command ledger: %w", err)
	}
	if raw != nil {
		if err := s.forgot.UnmarshalText(raw); err != nil {
			// Refuse to open rather than forget the floor: the ledger
			// could not vouch for any command.
			return fmt.Errorf("downlink: open the command ledger: %s is %q: %w", keyForgot, raw, err)
		}
	}
	return nil
}

// Finish records the final result of a command that Begin let run, and
// its audit entry. On error the command stays recorded as running: a retry
// may record it; a restart closes it as StatusUnknownOutcome.
func (s *Ledger) Finish(res Result) error {
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

// Refused adds to the refusal log a command refused before Begin: one
// that did not parse (cmd nil; say why in res.Reason), whose signature did
// not verify, that is for another gateway, or that came too late or too
// early. Its id is not recorded, so that a forgery cannot block the real
// command. Anyone who can publish can send these at will (a copy of a
// signed command included), so they are kept in a log of their own, with
// its own bound (MaxRefusedEntries): however many come, they evict no
// entry of a command that ran.
func (s *Ledger) Refused(cmd *Command, res Result) error {
	if res.At.IsZero() {
		res.At = s.opt.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.newBatch()
	b.refusal(res.At, cmd, &res)
	if err := s.commit(b); err != nil {
		return fmt.Errorf("downlink: audit refused command %q: %w", res.ID, err)
	}
	return nil
}

// prune adds to b the deletion of every forgettable id but spare (the one
// being answered), and the floor raised to their latest issued_at, and
// returns them, to forget once b is committed.
func (s *Ledger) prune(b *batch, spare string) []string {
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

// batch is one update of the aux bucket: records and audit entries that
// are committed together.
type batch struct {
	s      *Ledger
	put    map[string][]byte
	del    []string
	head   auditHead // the audit log's
	rhead  auditHead // the refusal log's
	since  time.Time // the id table's new start, if it moves
	forgot time.Time // the floor of forgotten ids, if it rises
}

func (s *Ledger) newBatch() *batch {
	return &batch{s: s, put: map[string][]byte{}, head: s.head, rhead: s.rhead}
}

func (b *batch) putID(r *idRecord) {
	data, err := json.Marshal(r)
	if err != nil {
		panic("downlink: marshal a command record: " + err.Error()) // only strings, times and valid values
	}
	b.put[prefixID+r.ID] = data
}

// commit writes b, then makes its audit head the ledger's.
func (s *Ledger) commit(b *batch) error {
	if len(b.put) == 0 && len(b.del) == 0 {
		return nil
	}
	b.trim(auditLog, &b.head, s.opt.MaxAuditEntries)
	b.trim(refusalLog, &b.rhead, s.opt.MaxRefusedEntries)
	if b.head != s.head {
		b.put[keyAuditHead], _ = json.Marshal(b.head)
	}
	if b.rhead != s.rhead {
		b.put[keyRefusedHead], _ = json.Marshal(b.rhead)
	}
	b.put[keyElapsed] = strconv.AppendInt(nil, int64(s.elapsed()), 10)
	if err := s.aux.UpdateAux(b.put, b.del); err != nil {
		return err
	}
	s.head, s.rhead = b.head, b.rhead
	if !b.since.IsZero() {
		s.since, s.sinceUnsynced = b.since, false
	}
	if !b.forgot.IsZero() {
		s.forgot = b.forgot
	}
	return nil
}
