package buffer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

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
	// Next, Peek and Each never look past it, so that nothing is delivered
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

// corruptError says that the file must be salvaged.
type corruptError struct {
	f      *os.File // the locked file when still open, or nil
	reason error
}

func (e *corruptError) Error() string { return "buffer: corrupt file: " + e.reason.Error() }

// openFile locks, checks and opens the file, sets b.db, b.file and b.epoch,
// and returns the state, marked not clean. It returns a *corruptError when
// the file must be salvaged.
func (b *Buffer) openFile() (state, error) {
	f, created, err := lockFile(b.path, lockTimeout)
	if err != nil {
		return state{}, fmt.Errorf("buffer: open %s: %w", b.path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return state{}, fmt.Errorf("buffer: open %s: %w", b.path, err)
	}
	size := fi.Size()

	var rep fileReport
	switch {
	case size > 0:
		// Every page, every time: a clean close does not protect against
		// a card that rots at rest, and bbolt trusts whatever it reads.
		rep, err = check(f, size)
		if err == nil {
			err = rep.schemaError()
		}
		if err != nil {
			return state{}, &corruptError{f: f, reason: err}
		}
	case !created:
		b.log.Warn("buffer: the file is empty (cut off while it was being created?); starting a new buffer", "path", b.path)
	}

	db, err := boltOpen(b.path, f, b.boltOptions(f))
	if err != nil {
		if errors.Is(err, errCorrupt) {
			return state{}, &corruptError{f: f, reason: err}
		}
		if boltRefused(err) {
			return state{}, &corruptError{reason: err} // bbolt closed f
		}
		return state{}, fmt.Errorf("buffer: open %s: %w", b.path, err)
	}
	if size > 0 {
		if err := boltCheck(db); err != nil {
			db.Close()
			return state{}, &corruptError{reason: err}
		}
	}
	if size > 0 && rep.hasState && !rep.state.clean {
		b.log.Info("buffer: the file was not closed cleanly (crash or power cut); its pages check out", "path", b.path)
	}

	var tail []kv
	if rep.badMetas > 0 {
		// bbolt fell back to the older meta page, one transaction back.
		// That transaction's pages were written and synced before its meta
		// page: take back its records from the raw file.
		if tail, err = b.tailRecords(db, f, size); err != nil {
			db.Close()
			return state{}, fmt.Errorf("buffer: open %s: %w", b.path, err)
		}
	}

	st, epoch, err := b.prepare(db, tail)
	if err != nil {
		db.Close()
		var ce *corruptError
		if errors.As(err, &ce) {
			return state{}, err
		}
		return state{}, fmt.Errorf("buffer: open %s: %w", b.path, err)
	}
	if rep.badMetas > 0 {
		b.log.Warn("buffer: one meta page was bad; opened the other, recovered the newer records from the raw pages",
			"path", b.path, "recovered", len(tail))
	}
	if created {
		if err := syncDir(filepath.Dir(b.path)); err != nil {
			db.Close()
			return state{}, fmt.Errorf("buffer: open %s: %w", b.path, err)
		}
	}
	b.db, b.file, b.epoch = db, f, epoch
	return st, nil
}

// schemaError says whether the checked file is one of ours (or a new one).
func (rep *fileReport) schemaError() error {
	switch {
	case rep.strangers > 0:
		return corruptf("not a fieldlink buffer: %d unknown top-level keys", rep.strangers)
	case rep.ours == 0 && !rep.dead:
		return nil // created by bbolt, cut off before the buckets
	case rep.ours != 4 || !rep.hasState || rep.epoch == "":
		return corruptf("buffer buckets or state missing")
	}
	return nil
}

// boltOptions returns the bbolt options for the file f (nil: bbolt opens it).
func (b *Buffer) boltOptions(f *os.File) *bolt.Options {
	o := &bolt.Options{
		Timeout: lockTimeout,
		// Never NoSync but for the power cut tests' control run: Interval
		// durability commits less often instead.
		NoSync: b.opt.UnsafeNoSync,
		// Syncing the freelist costs a page per commit, but without it bbolt
		// rebuilds the freelist by walking the whole tree at Open and after
		// every failed commit (disk full), and does that walk in a goroutine
		// of its own where a fault on a bad page cannot be recovered.
		NoFreelistSync: b.opt.noFreelistSync,
		MaxSize:        b.opt.maxFileSize,
		PageSize:       pageSize,
	}
	if b.opt.pageSize > 0 {
		o.PageSize = b.opt.pageSize
	}
	if f != nil {
		o.OpenFile = func(string, int, os.FileMode) (*os.File, error) { return f, nil }
	}
	return o
}

// boltOpen is bolt.Open with its panics and memory faults contained. On a
// panic f stays open and locked, for salvage.
func boltOpen(path string, f *os.File, o *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			if f != nil {
				unmapFile(f)
			}
			db, err = nil, corruptf("bbolt panicked opening the file: %v", p)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return bolt.Open(path, 0o600, o)
}

// boltRefused reports whether err is bbolt saying, at Open, that the file is
// not a sound bbolt file: corruption to salvage, not an error to return.
func boltRefused(err error) bool {
	return errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch)
}

// boltCheck runs bbolt's own consistency check, panics contained.
func boltCheck(db *bolt.DB) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = corruptf("bbolt panicked checking the file: %v", p)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return db.View(func(tx *bolt.Tx) error {
		var first error
		for e := range tx.Check() { // drain: Check's goroutine sends every error
			if first == nil {
				first = corruptf("bbolt check: %v", e)
			}
		}
		return first
	})
}

// prepare creates the buckets of a new file, or reads those of an existing
// one, puts back the tail records, marks the state not clean, and returns it
// with the epoch.
func (b *Buffer) prepare(db *bolt.DB, tail []kv) (st state, epoch string, err error) {
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			// A new file. If a floor file is there, an old file was lost:
			// its seqs are not reused.
			epoch = newEpoch()
			st = state{seq: b.floor, low: [2]uint64{b.floor + 1, b.floor + 1}}
			return createSchema(tx, epoch, st)
		}
		var ok bool
		if st, ok = decodeState(meta.Get(keyState)); !ok {
			return &corruptError{reason: corruptf("state does not verify")}
		}
		epoch = string(meta.Get(keyEpoch))
		seqB := tx.Bucket(bucketSeq)
		if epoch == "" || seqB == nil || tx.Bucket(bucketAlarm) == nil || tx.Bucket(bucketNormal) == nil {
			return &corruptError{reason: corruptf("buffer buckets missing")}
		}
		for _, r := range tail {
			q := qNormal
			if recordAlarm(r.v) {
				q = qAlarm
			}
			bk := tx.Bucket(queueBuckets[q])
			if bk.Get(r.k) != nil {
				continue
			}
			if err := bk.Put(r.k, r.v); err != nil {
				return err
			}
			st.n[q]++
			st.bytes[q] += recordSize(r.v)
			st.seq = max(st.seq, btoi(r.k))
		}
		st.seq = max(st.seq, seqB.Sequence())
		if err := seqB.SetSequence(st.seq); err != nil {
			return err
		}
		st.clean = false
		st.gen++
		return meta.Put(keyState, st.encode())
	})
	return st, epoch, err
}

// createSchema creates the buckets of a new buffer.
func createSchema(tx *bolt.Tx, epoch string, st state) error {
	for _, name := range [][]byte{bucketMeta, bucketSeq, bucketAlarm, bucketNormal} {
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if err := meta.Put(keyEpoch, []byte(epoch)); err != nil {
		return err
	}
	if err := tx.Bucket(bucketSeq).SetSequence(st.seq); err != nil {
		return err
	}
	return meta.Put(keyState, st.encode())
}

// newEpoch returns 8 random hex digits.
func newEpoch() string {
	var r [4]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(r[:])
}

// kv is a record copied out of a file.
type kv struct{ k, v []byte }

// tailRecords returns the verified records in the raw file f whose seq is
// above the sequence of the tree that db opened.
func (b *Buffer) tailRecords(db *bolt.DB, f *os.File, size int64) ([]kv, error) {
	var seq uint64
	if err := db.View(func(tx *bolt.Tx) error {
		if s := tx.Bucket(bucketSeq); s != nil {
			seq = s.Sequence()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	seen := make(map[uint64]bool)
	var tail []kv
	_, err := scanRecords(f, size, func(k, v []byte) error {
		if s := btoi(k); s > seq && !seen[s] {
			seen[s] = true
			tail = append(tail, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
		}
		return nil
	})
	return tail, err
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
