package buffer

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactTxSize is how many bytes bbolt.Compact copies per transaction.
const compactTxSize = 16 << 20

// compactSettle is how long the live bytes must stop falling fast before a
// compaction: see maybeCompact.
const compactSettle = time.Second

// compactBackoff is how long the writer waits after a failed compaction
// (disk full, say) before it tries again.
const compactBackoff = 10 * time.Minute

// maybeCompact compacts the file when it is larger than CompactMinSize and
// than CompactRatio times the live bytes (dead letters and aux included). It runs in
// the writer between transactions: appends made meanwhile wait in the queue.
func (w *writer) maybeCompact() {
	b := w.b
	w.dirty = false
	if b.opt.CompactRatio < 0 || w.fatal != nil || time.Now().Before(w.compactAt) {
		return
	}
	fi, err := os.Stat(b.path)
	if err != nil {
		return
	}
	size, live := fi.Size(), w.st.bytes[0]+w.st.bytes[1]+w.st.deadBytes
	if size > b.opt.CompactMinSize && size > int64(b.opt.CompactRatio)*live {
		// The aux bucket is live too (megabytes with the downlink's audit
		// log): weighed only now, as it takes a walk of its pages.
		live += w.auxBytes()
	}
	if hook := b.opt.compactCheck; hook != nil {
		hook(size, live)
	}
	if size <= b.opt.CompactMinSize || size <= int64(b.opt.CompactRatio)*live {
		w.markAt = time.Time{}
		return
	}
	// A buffer being drained shrinks at every ack: compacting it then
	// copies records about to be deleted, stalls appends and acks for the
	// copy, and is soon due again. Compact once the live bytes have fallen
	// by less than a tenth over compactSettle.
	now := time.Now()
	if w.markAt.IsZero() || now.Sub(w.markAt) >= compactSettle && live < w.liveMark-w.liveMark/10 {
		w.liveMark, w.markAt = live, now
		w.recheck.Reset(compactSettle)
		return
	}
	if now.Sub(w.markAt) < compactSettle {
		w.recheck.Reset(w.markAt.Add(compactSettle).Sub(now))
		return
	}
	w.markAt = time.Time{}
	start := time.Now()
	if err := w.compact(); err != nil {
		w.compactAt = time.Now().Add(compactBackoff)
		b.log.Warn("buffer: compaction failed; the file keeps its size", "path", b.path, "err", err)
		return
	}
	after := int64(0)
	if fi, err := os.Stat(b.path); err == nil {
		after = fi.Size()
	}
	if after > b.opt.CompactMinSize && after > int64(b.opt.CompactRatio)*live {
		// bbolt's overhead alone is above the ratio: do not compact again
		// and again.
		w.compactAt = time.Now().Add(compactBackoff)
	}
	b.log.Info("buffer: compacted", "path", b.path, "before", size, "after", after, "live", live, "took", time.Since(start))
}

// compact copies the live data into <path>.compact, syncs it, renames it
// over the file, syncs the directory and reopens. Seqs do not change, so
// leases stay valid.
func (w *writer) compact() error {
	b := w.b
	tmp := b.path + compactSuffix
	_ = os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, b.boltOptions(nil))
	if err != nil {
		return err
	}
	err = w.contain(func() error { return bolt.Compact(dst, b.db, compactTxSize) })
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncFile(tmp)
	}
	if err != nil {
		_ = os.Remove(tmp)
		if w.b.poisoned.Load() {
			w.fatal = b.setFatal(err)
		}
		return err
	}

	b.dbMu.Lock()
	defer b.dbMu.Unlock()
	if err := b.db.Close(); err != nil {
		b.log.Warn("buffer: close before compaction swap", "path", b.path, "err", err)
	}
	b.db = nil
	renameErr := os.Rename(tmp, b.path)
	if renameErr == nil {
		renameErr = syncDir(filepath.Dir(b.path))
	} else {
		_ = os.Remove(tmp)
	}
	f, _, err := lockFile(b.path, lockTimeout)
	if err == nil {
		b.db, err = boltOpen(b.path, f, b.boltOptions(f))
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		// Without a file there is no buffer.
		w.fatal = b.setFatal(fmt.Errorf("%w: reopen %s after compaction: %w", ErrFatal, b.path, err))
		return err
	}
	b.file = f
	if renameErr != nil {
		return renameErr
	}
	w.st.compactions++
	b.statMu.Lock()
	b.st.compactions = w.st.compactions
	b.statMu.Unlock()
	return nil
}

// syncFile fsyncs the file at path.
func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
