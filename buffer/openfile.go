package buffer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

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
