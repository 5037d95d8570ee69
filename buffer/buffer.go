package buffer

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"fieldlink/internal/kclock"
)

// Buffer is a durable store-and-forward queue of packets in one bbolt file.
// It is safe for concurrent use. Its one goroutine, the writer, stops with
// Close.
type Buffer struct {
	path  string
	opt   Options
	log   *slog.Logger
	epoch string

	// dbMu is held for reading around every read transaction and for
	// writing by the writer when it swaps the file (compaction) and by Close.
	// The writer's own transactions do not take it: only the writer changes db.
	dbMu sync.RWMutex
	db   *bolt.DB
	file *os.File // db's file, locked; bbolt closes it with db

	// sendMu is held for reading while a request is queued; Close takes it
	// for writing to stop new requests before it closes reqs.
	sendMu  sync.RWMutex
	closed  bool
	reqs    chan *request
	done    chan struct{} // closed when the writer has exited
	closing chan struct{} // closed when Close starts: wakes Wait

	closeOnce sync.Once
	closeErr  error

	// clockMu guards spans, this boot's runs of records stamped from an
	// unsynchronised clock (see clock.go); waiting says there are some.
	clockMu sync.Mutex
	spans   []span
	waiting atomic.Bool
	boot    string // this boot's id; "" where there is none: no re-stamp

	// mu guards the leases and the notify channel.
	mu     sync.Mutex
	leases map[uint64]lease
	// leasedTo, per queue, is a seq at or below which every record is
	// leased or gone (the last one a leasing forward scan visited); zeroed
	// when a release may have freed one below it.
	leasedTo [2]uint64
	notify   chan struct{} // closed and replaced when records may have become available

	// durable is the highest seq whose commit has completed (fsyncs and all).
	// Lease, Peek and Each never look past it, so that nothing is delivered
	// that a power cut could still take back.
	durable atomic.Uint64

	fatal    atomic.Pointer[error] // set once: every write fails with it
	poisoned atomic.Bool           // bbolt panicked inside a transaction: do not touch db again

	count atomic.Int64 // committed records
	// laterAcked counts records AckLater took whose deletion waits for
	// the next commit: acknowledged, so not waiting for an upstream.
	laterAcked atomic.Int64
	bytes      atomic.Int64 // their bytes

	appends, acks, commits, fsyncs atomic.Uint64 // since Open

	statMu    sync.Mutex
	st        state // as of the last commit
	lastErr   string
	lastErrAt time.Time

	floor uint64  // the seq floor read at Open (see floor.go)
	w     *writer // owned by the writer goroutine
}

// compactSuffix names the file that compaction builds next to the buffer.
const compactSuffix = ".compact"

// Open opens the buffer at path, creating the directory and the file if
// needed, and starts its writer.
//
// Open reads every page of the file before bbolt maps it (about half a
// second for a million records, warm), because bbolt trusts its file and can
// crash the process on a bad one; then it runs bbolt's own check. A file that
// is not a sound buffer file (truncated, garbled, not bbolt, not ours) is
// moved aside as <path>.corrupt-<UTC timestamp>, every record in it that
// still verifies is copied into a fresh file with a new epoch, and the loss
// is logged at Error and counted in Stats; Open then succeeds.
//
// A file locked by another process is not corruption: Open waits a second,
// then returns an error wrapping ErrLocked that names the path.
func Open(path string, opt Options) (*Buffer, error) {
	opt = opt.withDefaults()
	b := &Buffer{
		path:    path,
		opt:     opt,
		log:     opt.Logger,
		reqs:    make(chan *request, queueLen),
		done:    make(chan struct{}),
		closing: make(chan struct{}),
		leases:  make(map[uint64]lease),
		notify:  make(chan struct{}),
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("buffer: open %s: %w", path, err)
	}
	// A compaction cut short by a crash leaves its unfinished copy behind.
	_ = os.Remove(path + compactSuffix)

	b.floor = readFloor(path)
	st, err := b.load()
	if err != nil {
		return nil, err
	}
	b.publish(st)
	b.w = &writer{b: b, st: st, lastIssued: st.seq, floor: b.floor}
	go b.w.run()
	b.boot = opt.BootID
	if b.boot == "" {
		b.boot = kclock.BootID()
	}
	if err := b.loadSpans(); err != nil {
		b.log.Warn("buffer: cannot read the clock spans: packets stamped before the clock was set keep their mark", "path", b.path, "err", err)
	}
	return b, nil
}

// load opens the file, salvaging it once if it is corrupt, and returns its
// state.
func (b *Buffer) load() (state, error) {
	st, err := b.openFile()
	var ce *corruptError
	if !errors.As(err, &ce) {
		return st, err
	}
	if err := b.salvage(ce); err != nil {
		return state{}, err
	}
	st, err = b.openFile()
	if errors.As(err, &ce) {
		return state{}, fmt.Errorf("buffer: open %s: the salvaged file is corrupt too: %w", b.path, ce.reason)
	}
	return st, err
}

// publish makes st the state that Len, Bytes and Stats report.
func (b *Buffer) publish(st state) {
	b.durable.Store(st.seq)
	b.count.Store(st.n[0] + st.n[1])
	b.bytes.Store(st.bytes[0] + st.bytes[1])
	b.statMu.Lock()
	b.st = st
	b.statMu.Unlock()
}

// noteError records err as the last error, for Stats.
func (b *Buffer) noteError(err error) {
	b.statMu.Lock()
	b.lastErr, b.lastErrAt = err.Error(), b.opt.Now()
	b.statMu.Unlock()
}

// setFatal makes err (which wraps ErrFatal) the answer to every later write.
func (b *Buffer) setFatal(err error) error {
	if b.fatal.CompareAndSwap(nil, &err) {
		b.log.Error("buffer: fatal error: the process must exit and restart", "path", b.path, "err", err)
		b.noteError(err)
	}
	return *b.fatal.Load()
}

// usable returns ErrClosed or the fatal error, if any.
func (b *Buffer) usable() error {
	if e := b.fatal.Load(); e != nil {
		return *e
	}
	select {
	case <-b.closing:
		return ErrClosed
	default:
	}
	return nil
}

// Epoch returns the buffer's epoch: 8 random hex digits, fixed when the file
// was created and renewed when it was salvaged, so that (GatewayId, Epoch,
// Seq) never names two packets.
func (b *Buffer) Epoch() string { return b.epoch }

// Len returns the number of records stored (committed), leased or not.
func (b *Buffer) Len() int { return int(max(b.count.Load()-b.laterAcked.Load(), 0)) }

// Bytes returns the bytes of the records stored, as MaxBytes counts them.
func (b *Buffer) Bytes() int64 { return b.bytes.Load() }

// Close commits what is queued, marks the file cleanly closed, stops the
// writer and closes the file. It waits for the writer; it is safe to call
// more than once.
func (b *Buffer) Close() error {
	b.closeOnce.Do(func() {
		close(b.closing)
		b.sendMu.Lock()
		b.closed = true
		close(b.reqs)
		b.sendMu.Unlock()
		<-b.done

		b.dbMu.Lock()
		defer b.dbMu.Unlock()
		if b.poisoned.Load() {
			// bbolt may hold its own locks after a panic: closing it could
			// hang. Unmap the file (the mapping holds the open file, and so
			// the flock) and close it, so that the restarted process, or
			// the next Open, gets the lock.
			unmapFile(b.file)
			b.closeErr = b.file.Close()
		} else if b.db != nil {
			b.closeErr = b.db.Close()
		}
		b.db = nil
		if b.closeErr != nil {
			b.closeErr = fmt.Errorf("buffer: close %s: %w", b.path, b.closeErr)
		}
	})
	return b.closeErr
}
