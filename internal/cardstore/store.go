// Package cardstore keeps a gateway going on a failing SD card: it puts a
// volatile buffer beside the card's buffer, routes the packets there while
// the card cannot store them, says so once per change of state, and goes
// back to the card by itself when the card recovers.
//
// The card's buffer ([buffer.Buffer] at the site's buffer.path) is the
// durable path. When one of its writes fails for the card's sake — an I/O
// error (EIO, which makes the buffer fatal), a file system that went
// read-only (EROFS, ext4's errors=remount-ro), a full card (ENOSPC) — or it
// cannot be opened for one of these reasons at the start, the packets go
// to the volatile buffer instead: a second buffer.Buffer on tmpfs (/run,
// else /dev/shm, else os.TempDir()), with its own random epoch so that
// (GatewayId, Epoch, Seq) stays unique, and a small MaxBytes that drops
// the oldest normal readings first and alarms last. It is lost by a power
// cut or a reboot, which the status says.
//
// [Store] is the delivery loop's buffer (uplink.Buffer) over both buffers:
// alarms first, then by reading time, oldest first. The
// volatile buffer's seqs carry bit 63 ([Volatile]), so that acks reach the
// buffer that leased them.
//
// Recovery is [Store.Retry], which [Store.Run] calls on a backoff (5 s,
// doubling up to a minute): a fatal card buffer is closed, then opened
// again — Open checks the whole file and salvages it if needed — and the
// next batch is tried on the card; the first one that commits makes the
// store durable again. A slow card (a commit that takes 2 s or more) stays
// the durable path — the pollers do not wait for it (buffer.Appender) — and
// is reported as slow.
package cardstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"fieldlink/buffer"
	"fieldlink/packet"
)

// Volatile marks the seqs of the volatile buffer's records in the queue
// that Store presents.
const Volatile = uint64(1) << 63

// Card is what the store uses of a buffer: a [buffer.Buffer].
type Card interface {
	AppendAll(ctx context.Context, ps ...*packet.Packet) error
	Next(max int) ([]buffer.Record, error)
	Ack(seqs ...uint64) error
	AckLater(seqs ...uint64) error
	Release(seqs ...uint64)
	Wait(ctx context.Context) error
	DeadLetter(reason string, seqs ...uint64) error
	Aux(key string) ([]byte, error)
	ScanAux(prefix string, fn func(key string, value []byte) error) error
	UpdateAux(put map[string][]byte, del []string) error
	PutAux(key string, value []byte) error
	Epoch() string
	Len() int
	Stats() buffer.Stats
	Close() error
}

// Fault is why the buffer is not (fully) well.
type Fault string

// The faults, as the metrics' reason label gives them.
const (
	OK       Fault = "ok"
	IOError  Fault = "io_error"
	ReadOnly Fault = "read_only"
	Full     Fault = "full"
	Slow     Fault = "slow"
)

// State is the store's durability, for the log, the status page and the
// metrics.
type State struct {
	// Durable: packets are stored on the card before they count as taken.
	Durable bool
	Fault   Fault
	// Words say it as a technician reads it: "buffer not durable: the card
	// answers I/O errors"; "" when well.
	Words string
	// Since is when the state began.
	Since time.Time
	// Volatile is how many packets the volatile buffer holds (lost by a
	// power cut), and VolatilePath where it is; "" before the first fault.
	Volatile     int
	VolatilePath string
	// Took is the last slow commit's duration (Fault Slow).
	Took time.Duration
}

// words says f as a technician reads it.
func words(f Fault, took time.Duration) string {
	switch f {
	case IOError:
		return "buffer not durable: the card answers I/O errors"
	case ReadOnly:
		return "buffer not durable: the card is read-only"
	case Full:
		return "buffer not durable: the card is full"
	case Slow:
		return fmt.Sprintf("buffer slow: the card's writes take %.1f s", took.Seconds())
	}
	return ""
}

// Options configure a Store.
type Options struct {
	// Path and Buffer open the card's buffer (the volatile buffer takes
	// Buffer's options but its bound and policy).
	Path   string
	Buffer buffer.Options
	// OpenCard opens the card's buffer; nil is buffer.Open(Path, Buffer).
	OpenCard func() (Card, error)
	// VolatileDir holds the volatile buffer; "" picks /run/fieldlink, then
	// /dev/shm/fieldlink-UID, then os.TempDir()/fieldlink-UID (tmpfs
	// first: not the card).
	VolatileDir string
	// VolatileMaxBytes bounds the volatile buffer; default 4 MiB.
	VolatileMaxBytes int64
	// SlowAfter is the commit time from which the card counts as slow;
	// default 2 s.
	SlowAfter time.Duration
	// Retry is the first wait before the card is tried again, doubling up
	// to MaxRetry; defaults 5 s and 1 min.
	Retry, MaxRetry time.Duration
	Logger          *slog.Logger
}

// Store is the gateway's buffer on a card that may fail. Its methods are
// safe for concurrent use.
type Store struct {
	opt Options
	log *slog.Logger

	mu      sync.Mutex
	card    Card // nil: not open
	broken  bool // card failed for good (ErrFatal): Retry closes and reopens it
	mem     Card // nil until the first fault
	memPath string
	state   State
	tryCard bool          // the next batch goes to the card (a retry is due)
	wait    time.Duration // the current backoff
	changed chan struct{} // closed when the set of buffers changes
	closed  bool

	since func(time.Time) time.Duration // time.Since; tests time commits their own way
}

// Open opens the card's buffer, or, when the card fails for one of the
// faults above, starts without it (not durable) and tries again on Run's
// backoff. Other errors (permissions, a lock another process holds) are
// returned.
func Open(opt Options) (*Store, error) {
	if opt.OpenCard == nil {
		opt.OpenCard = func() (Card, error) {
			b, err := buffer.Open(opt.Path, opt.Buffer)
			if err != nil {
				return nil, err
			}
			return b, nil
		}
	}
	if opt.VolatileMaxBytes <= 0 {
		opt.VolatileMaxBytes = 4 << 20
	}
	if opt.SlowAfter <= 0 {
		opt.SlowAfter = 2 * time.Second
	}
	if opt.Retry <= 0 {
		opt.Retry = 5 * time.Second
	}
	if opt.MaxRetry < opt.Retry {
		opt.MaxRetry = max(time.Minute, opt.Retry)
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{opt: opt, log: log, changed: make(chan struct{}), wait: opt.Retry, since: time.Since}
	s.state = State{Durable: true, Fault: OK, Since: time.Now()}
	card, err := opt.OpenCard()
	if err != nil {
		f := classify(err)
		if f == OK {
			return nil, err
		}
		s.mu.Lock()
		merr := s.openMemLocked()
		s.setLocked(f, 0, err)
		s.mu.Unlock()
		err = merr
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s.card = card
	// A volatile buffer a previous process left (a restart on a faulty
	// card) still holds readings not yet delivered: deliver them.
	if p := s.volatilePath(); p != "" {
		if _, err := os.Stat(p); err == nil {
			s.mu.Lock()
			if err := s.openMemLocked(); err != nil {
				s.log.Warn("buffer: the volatile buffer a previous run left cannot be opened", "path", p, "err", err)
			}
			s.mu.Unlock()
		}
	}
	return s, nil
}

// classify says which card fault err is; OK for an error that is not the
// card's.
func classify(err error) Fault {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, syscall.EROFS), strings.Contains(err.Error(), syscall.EROFS.Error()):
		return ReadOnly
	case errors.Is(err, buffer.ErrDiskFull), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT),
		strings.Contains(err.Error(), syscall.ENOSPC.Error()):
		return Full
	case errors.Is(err, buffer.ErrFatal), errors.Is(err, syscall.EIO), strings.Contains(err.Error(), syscall.EIO.Error()):
		return IOError
	}
	return OK
}

// setLocked enters fault f (OK: durable again), logging the change once.
func (s *Store) setLocked(f Fault, took time.Duration, cause error) {
	prev := s.state.Fault
	s.state.Took = took
	s.state.Words = words(f, took)
	s.state.Durable = f == OK || f == Slow
	if prev == f {
		return
	}
	s.state.Fault, s.state.Since = f, time.Now()
	switch {
	case f == OK:
		s.log.Warn("buffer durable again: packets are stored on the card", "path", s.opt.Path, "was", string(prev))
	case f == Slow:
		s.log.Warn(s.state.Words, "path", s.opt.Path, "took_s", took.Seconds())
	default:
		attrs := []any{"path", s.opt.Path, "volatile", s.memPath}
		if cause != nil {
			attrs = append(attrs, "err", cause)
		}
		s.log.Error(s.state.Words+"; live readings go upstream from memory and are lost by a power cut until the card recovers", attrs...)
	}
}

// volatilePath is where the volatile buffer lives.
func (s *Store) volatilePath() string {
	if s.memPath != "" {
		return s.memPath
	}
	// One per card buffer: two gateways (or tests) on one machine do not
	// share it.
	abs, err := filepath.Abs(s.opt.Path)
	if err != nil {
		abs = s.opt.Path
	}
	h := fnv.New32a()
	h.Write([]byte(abs))
	name := fmt.Sprintf("%s-%08x.volatile.db", strings.TrimSuffix(filepath.Base(s.opt.Path), ".db"), h.Sum32())
	if s.opt.VolatileDir != "" {
		return filepath.Join(s.opt.VolatileDir, name)
	}
	for _, d := range volatileDirs() {
		if err := os.MkdirAll(d, 0o700); err == nil && writable(d) {
			return filepath.Join(d, name)
		}
	}
	return ""
}

// volatileDirs are the candidate directories of the volatile buffer,
// tmpfs first.
func volatileDirs() []string {
	uid := fmt.Sprint(os.Getuid())
	return []string{"/run/fieldlink", "/dev/shm/fieldlink-" + uid, filepath.Join(os.TempDir(), "fieldlink-"+uid)}
}

// writable reports whether a file can be created in dir.
func writable(dir string) bool {
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

// openMemLocked opens the volatile buffer if it is not open.
func (s *Store) openMemLocked() error {
	if s.mem != nil {
		return nil
	}
	p := s.volatilePath()
	if p == "" {
		return errors.New("buffer: no directory for the volatile buffer (/run/fieldlink, /dev/shm, the temporary directory)")
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("buffer: volatile buffer: %w", err)
	}
	o := s.opt.Buffer
	o.MaxBytes = s.opt.VolatileMaxBytes
	o.WhenFull = buffer.DropOldest
	o.Durability = buffer.Always // fsync on tmpfs costs nothing
	o.Logger = s.log.With("volatile", true)
	m, err := buffer.Open(p, o)
	if err != nil {
		return fmt.Errorf("buffer: volatile buffer: %w", err)
	}
	s.mem, s.memPath = m, p
	s.state.VolatilePath = p
	s.changedLocked()
	return nil
}

// changedLocked wakes the Waits.
func (s *Store) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// AppendAll stores ps on the card, or, while the card cannot store them,
// in the volatile buffer. It returns an error only for packets stored in
// neither, and never one that wraps buffer.ErrFatal: the card's failure is
// the store's to handle, not the caller's.
func (s *Store) AppendAll(ctx context.Context, ps ...*packet.Packet) error {
	s.mu.Lock()
	card := s.card
	useCard := card != nil && !s.broken && (s.state.Durable || s.tryCard)
	s.tryCard = false
	s.mu.Unlock()
	rest := ps
	if useCard {
		t0 := time.Now()
		err := card.AppendAll(ctx, ps...)
		took := s.since(t0)
		f := classify(err)
		s.mu.Lock()
		switch {
		case f == OK && err != nil:
			// Not the card's fault (the policy refused packets, ctx
			// ended): as a buffer would.
			s.mu.Unlock()
			return err
		case f == OK && took >= s.opt.SlowAfter:
			s.setLocked(Slow, took, nil)
		case f == OK:
			if s.state.Fault != OK && (s.state.Fault != Slow || took < s.opt.SlowAfter/2) {
				s.setLocked(OK, 0, nil)
				s.wait = s.opt.Retry
			}
		default:
			if errors.Is(err, buffer.ErrFatal) {
				s.broken = true
				s.changedLocked()
			}
			merr := s.openMemLocked() // first: the log says where it is
			s.setLocked(f, 0, err)
			if merr != nil {
				s.mu.Unlock()
				return errors.New(merr.Error())
			}
		}
		s.mu.Unlock()
		if f == OK {
			return nil
		}
		rest = unstored(ps)
	}
	s.mu.Lock()
	mem := s.mem
	if mem == nil {
		if err := s.openMemLocked(); err != nil {
			s.mu.Unlock()
			return errors.New(err.Error())
		}
		mem = s.mem
	}
	s.mu.Unlock()
	if err := mem.AppendAll(ctx, rest...); err != nil {
		return errors.New(err.Error()) // not ErrFatal: the card's buffer is what counts
	}
	return nil
}

// unstored are the packets of ps that did not get a Seq.
func unstored(ps []*packet.Packet) []*packet.Packet {
	var out []*packet.Packet
	for _, p := range ps {
		if p != nil && p.Seq == 0 {
			out = append(out, p)
		}
	}
	return out
}

// Retry tries the card again once a fault is on: a broken card buffer is
// closed and opened again (Open checks and salvages it), a missing one is
// opened, and the next batch goes to the card. It returns the wait before
// the next Retry: the backoff, doubled after each failed attempt.
func (s *Store) Retry() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.opt.MaxRetry
	}
	if s.state.Durable {
		s.wait = s.opt.Retry
		return s.wait
	}
	if s.broken && s.card != nil {
		if err := s.card.Close(); err != nil {
			s.log.Debug("buffer: closing the failed card buffer", "err", err)
		}
		s.card, s.broken = nil, false
		s.changedLocked()
	}
	if s.card == nil {
		c, err := s.opt.OpenCard()
		if err != nil {
			if f := classify(err); f != OK {
				s.setLocked(f, 0, err)
			} else {
				s.log.Debug("buffer: the card's buffer does not open yet", "err", err)
			}
			return s.backoffLocked()
		}
		s.card = c
		s.changedLocked()
	}
	s.tryCard = true
	return s.backoffLocked()
}

// backoffLocked returns the current wait and doubles the next.
func (s *Store) backoffLocked() time.Duration {
	w := s.wait
	s.wait = min(2*s.wait, s.opt.MaxRetry)
	return w
}

// Run calls Retry on its backoff until ctx ends.
func (s *Store) Run(ctx context.Context) {
	t := time.NewTimer(s.opt.Retry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(s.Retry())
		}
	}
}

// State returns the store's durability.
func (s *Store) State() State {
	s.mu.Lock()
	st, mem := s.state, s.mem
	s.mu.Unlock()
	if mem != nil {
		st.Volatile = mem.Len()
	}
	return st
}

// buffers returns the card (nil when not usable) and the volatile buffer.
func (s *Store) buffers() (card, mem Card, changed chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	card = s.card
	if s.broken {
		card = nil
	}
	return card, s.mem, s.changed
}

// Card is the card's buffer, nil while it is not open.
func (s *Store) Card() Card {
	c, _, _ := s.buffers()
	return c
}

// Next leases up to max records of both buffers: alarms first, then by
// reading time, oldest first. The volatile buffer's seqs carry [Volatile].
func (s *Store) Next(max int) ([]buffer.Record, error) {
	card, mem, _ := s.buffers()
	var out []buffer.Record
	var cerr error
	if card != nil {
		out, cerr = card.Next(max)
	}
	if mem != nil {
		mr, err := mem.Next(max)
		if err != nil && cerr == nil && card == nil {
			return nil, err
		}
		for i := range mr {
			mr[i].Seq |= Volatile
		}
		out = append(out, mr...)
	}
	if len(out) == 0 {
		return nil, cerr
	}
	// Alarms first, then by reading time, oldest first: the volatile
	// readings are not starved by a card that gets new ones all the time.
	slices.SortStableFunc(out, func(a, b buffer.Record) int {
		if a.Alarm != b.Alarm {
			if a.Alarm {
				return -1
			}
			return 1
		}
		return a.At.Compare(b.At)
	})
	if len(out) > max {
		s.Release(seqsOf(out[max:])...)
		out = out[:max]
	}
	return out, nil
}

func seqsOf(rs []buffer.Record) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

// split parts seqs into the card's and the volatile buffer's (untagged).
func split(seqs []uint64) (card, mem []uint64) {
	for _, q := range seqs {
		if q&Volatile != 0 {
			mem = append(mem, q&^Volatile)
		} else {
			card = append(card, q)
		}
	}
	return card, mem
}

// each runs fn on the card's and the volatile buffer's share of seqs.
func (s *Store) each(seqs []uint64, fn func(Card, []uint64) error) error {
	cs, ms := split(seqs)
	card, mem, _ := s.buffers()
	var errs []error
	if len(cs) > 0 {
		if card == nil {
			// The card's buffer failed after it leased them: they stay on
			// the card and are delivered again once it is back.
			errs = append(errs, errors.New("buffer: the card's buffer is not usable; its records are delivered again once it is"))
		} else {
			errs = append(errs, fn(card, cs))
		}
	}
	if len(ms) > 0 && mem != nil {
		errs = append(errs, fn(mem, ms))
	}
	return errors.Join(errs...)
}

// Ack deletes delivered records.
func (s *Store) Ack(seqs ...uint64) error {
	return s.each(seqs, func(c Card, q []uint64) error { return c.Ack(q...) })
}

// AckLater deletes delivered records with the next commit.
func (s *Store) AckLater(seqs ...uint64) error {
	return s.each(seqs, func(c Card, q []uint64) error { return c.AckLater(q...) })
}

// Release returns undelivered records to the queue.
func (s *Store) Release(seqs ...uint64) {
	_ = s.each(seqs, func(c Card, q []uint64) error { c.Release(q...); return nil })
}

// DeadLetter moves refused records out of the queue.
func (s *Store) DeadLetter(reason string, seqs ...uint64) error {
	return s.each(seqs, func(c Card, q []uint64) error { return c.DeadLetter(reason, q...) })
}

// Wait blocks until a record can be leased from either buffer, the set of
// buffers changes, or ctx ends.
func (s *Store) Wait(ctx context.Context) error {
	card, mem, changed := s.buffers()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 2)
	n := 0
	for _, b := range []Card{card, mem} {
		if b != nil {
			n++
			go func() { done <- b.Wait(wctx) }()
		}
	}
	for ; n > 0; n-- {
		select {
		case err := <-done:
			if err == nil {
				return nil
			}
			// A buffer that failed or closed: wait for the other, or for
			// the store to change.
		case <-changed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errNoCard answers the aux calls while the card's buffer is not open.
var errNoCard = errors.New("buffer: the card's buffer is not open (the card failed)")

// Aux reads a key of the card's aux state.
func (s *Store) Aux(key string) ([]byte, error) {
	if c := s.Card(); c != nil {
		return c.Aux(key)
	}
	return nil, errNoCard
}

// ScanAux reads the card's aux keys under prefix.
func (s *Store) ScanAux(prefix string, fn func(key string, value []byte) error) error {
	if c := s.Card(); c != nil {
		return c.ScanAux(prefix, fn)
	}
	return errNoCard
}

// UpdateAux sets and deletes aux keys on the card.
func (s *Store) UpdateAux(put map[string][]byte, del []string) error {
	if c := s.Card(); c != nil {
		return c.UpdateAux(put, del)
	}
	return errNoCard
}

// PutAux sets an aux key on the card.
func (s *Store) PutAux(key string, value []byte) error {
	if c := s.Card(); c != nil {
		return c.PutAux(key, value)
	}
	return errNoCard
}

// Epoch is the card's buffer's epoch, or the volatile one's while the
// card's buffer is not open.
func (s *Store) Epoch() string {
	card, mem, _ := s.buffers()
	if card != nil {
		return card.Epoch()
	}
	if mem != nil {
		return mem.Epoch()
	}
	return ""
}

// Len is how many records both buffers hold.
func (s *Store) Len() int {
	card, mem, _ := s.buffers()
	n := 0
	for _, b := range []Card{card, mem} {
		if b != nil {
			n += b.Len()
		}
	}
	return n
}

// Stats are the card's buffer's statistics (the volatile buffer's while
// the card's is not open); ok is false with neither.
func (s *Store) Stats() (buffer.Stats, bool) {
	card, mem, _ := s.buffers()
	switch {
	case card != nil:
		return card.Stats(), true
	case mem != nil:
		return mem.Stats(), true
	}
	return buffer.Stats{}, false
}

// Close closes both buffers. The volatile buffer's file is removed when
// it is empty (its readings were delivered); its seq file stays, so that
// the next volatile buffer of this boot goes on with higher seqs.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.card != nil {
		err := s.card.Close()
		if !s.broken {
			errs = append(errs, err)
		}
	}
	if s.mem != nil {
		empty := s.mem.Len() == 0
		errs = append(errs, s.mem.Close())
		if empty {
			if err := os.Remove(s.memPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Debug("buffer: volatile file not removed", "path", s.memPath, "err", err)
			}
		}
	}
	return errors.Join(errs...)
}
