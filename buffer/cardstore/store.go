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
	"strings"
	"sync"
	"time"

	"fieldlink/buffer"
	"fieldlink/packet"
)

// Buffer is what the store uses of a buffer, the card's and the volatile
// one: a [buffer.Buffer].
type Buffer interface {
	AppendAll(ctx context.Context, ps ...*packet.Packet) error
	Lease(max int) ([]buffer.Record, error)
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

// Options configure a Store.
type Options struct {
	// Path and Buffer open the card's buffer (the volatile buffer takes
	// Buffer's options but its bound and policy).
	Path   string
	Buffer buffer.Options
	// OpenCard opens the card's buffer; nil is buffer.Open(Path, Buffer).
	OpenCard func() (Buffer, error)
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
	card    Buffer // nil: not open
	broken  bool   // card failed for good (ErrFatal): Retry closes and reopens it
	mem     Buffer // nil until the first fault
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
		opt.OpenCard = func() (Buffer, error) {
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

// volatilePath is where the volatile buffer lives.
func (s *Store) volatilePath() string {
	if s.memPath != "" {
		return s.memPath
	}
	name := volatileName(s.opt.Path)
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

// volatileName is the volatile buffer's file name for the card buffer at
// cardPath: one per card buffer, so that two gateways (or tests) on one
// machine do not share it.
func volatileName(cardPath string) string {
	abs, err := filepath.Abs(cardPath)
	if err != nil {
		abs = cardPath
	}
	h := fnv.New32a()
	h.Write([]byte(abs))
	return fmt.Sprintf("%s-%08x.volatile.db", strings.TrimSuffix(filepath.Base(cardPath), ".db"), h.Sum32())
}

// LeftVolatile returns the volatile buffer a stopped gateway left beside
// the card buffer at cardPath (in the default directories), with the
// readings it had not delivered yet; the next start delivers them. ok is
// false when there is none.
func LeftVolatile(cardPath string) (path string, ok bool) {
	name := volatileName(cardPath)
	for _, d := range volatileDirs() {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
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

// buffers returns the card (nil when not usable) and the volatile buffer.
func (s *Store) buffers() (card, mem Buffer, changed chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	card = s.card
	if s.broken {
		card = nil
	}
	return card, s.mem, s.changed
}

// Card is the card's buffer, nil while it is not open.
func (s *Store) Card() Buffer {
	c, _, _ := s.buffers()
	return c
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
