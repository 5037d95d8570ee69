package buffer

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// writer is the goroutine that owns every write transaction. This file
// holds its loop and what every transaction shares (begin, batch, commit,
// finish); the work of each request lives with its concept: append.go,
// ack.go, dead.go, evict.go, purge.go, aux.go, corrupt.go, compact.go.
type writer struct {
	b          *Buffer
	st         state  // as committed (plus counters that ride on the next commit)
	lastIssued uint64 // the highest seq handed out, committed or not
	retryAcks  []uint64
	laterAcks  []uint64    // AckLater's seqs, deleted by the next commit
	laterSince time.Time   // when the oldest of them arrived
	retryDead  []deadBatch // dead letters whose commit failed
	held       []held      // Interval appends answered, not yet committed (after a failed commit)
	degraded   bool        // the last commit failed: commit every batch at once until one succeeds
	full       bool        // the last commit failed on a full disk: deletions commit first, alone
	fatal      error
	failedAt   time.Time // last failure logged, to log a failing disk once a minute
	dirty      bool      // records deleted since compaction was last considered
	compactAt  time.Time // no compaction before (after a failed one)
	// A compaction is due once the live bytes stop falling: liveMark is
	// their value at markAt, and recheck fires to look again.
	liveMark   int64
	markAt     time.Time
	recheck    *time.Timer
	floor      uint64    // every seq below it may be handed out (see floor.go)
	floorRetry time.Time // no floor write before (after a failed one)
}

// retryDelay is how long failed acks wait before the writer retries them
// without being asked.
const retryDelay = time.Second

// run is the writer goroutine: it turns queued requests into transactions,
// evicts aged records, retries the work of failed commits and compacts the
// file, until Close closes the queue.
func (w *writer) run() {
	b := w.b
	defer close(b.done)
	debug.SetPanicOnFault(true) // a bad page must not crash the gateway: see contain

	var ageC <-chan time.Time
	if b.opt.MaxAge > 0 {
		t := time.NewTicker(min(max(b.opt.MaxAge/10, time.Second), time.Minute))
		defer t.Stop()
		ageC = t.C
	}
	retry := time.NewTimer(retryDelay)
	retry.Stop()
	w.dirty = true // consider compaction at start-up
	w.recheck = time.NewTimer(time.Hour)
	w.recheck.Stop()
	defer w.recheck.Stop()
	// flush commits AckLater's deletions when no other commit took them.
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	for {
		if w.dirty {
			w.maybeCompact()
		}
		if w.retrying() && w.fatal == nil {
			retry.Reset(retryDelay)
		}
		if len(w.laterAcks) > 0 && w.fatal == nil {
			flush.Reset(max(time.Until(w.laterSince.Add(b.opt.laterDelay)), 0))
		}
		select {
		case r, ok := <-b.reqs:
			if !ok {
				w.shutdown()
				return
			}
			if r.op == opAck && r.later && len(w.laterAcks)+len(r.seqs) < maxBatch {
				// Rides on the next commit.
				if r.take() {
					if len(w.laterAcks) == 0 {
						w.laterSince = time.Now()
					}
					w.laterAcks = append(w.laterAcks, r.seqs...)
					b.laterAcked.Store(int64(len(w.laterAcks)))
				}
				break
			}
			if w.batch(r) {
				w.shutdown()
				return
			}
		case <-flush.C:
			if len(w.laterAcks) > 0 {
				w.batch(nil)
			}
		case <-ageC:
			w.evictAged()
		case <-w.recheck.C:
			w.dirty = true
		case <-retry.C:
			if w.retrying() {
				w.batch(nil)
			}
		}
		retry.Stop()
		flush.Stop()
	}
}

// retrying reports whether work of a failed commit waits to be retried.
func (w *writer) retrying() bool {
	return len(w.retryAcks) > 0 || len(w.retryDead) > 0 || len(w.held) > 0
}

// shutdown drains nothing (the queue is closed and empty) and marks the
// file cleanly closed, unless the buffer failed.
func (w *writer) shutdown() {
	if w.fatal != nil {
		return
	}
	t, err := w.begin()
	if err != nil {
		return
	}
	w.applyRetries(t)
	t.st.clean = true
	if err := w.commit(t); err != nil {
		if len(t.held) > 0 {
			w.b.log.Error("buffer: appends already acknowledged (durability: interval) are lost: the last commit failed",
				"path", w.b.path, "lost", len(t.held), "err", err)
		}
		w.b.log.Warn("buffer: could not mark the file closed cleanly", "path", w.b.path, "err", err)
	}
}

// contain runs fn, turning a panic (bbolt's, on a file gone bad while open,
// or a memory fault) into a fatal error.
func (w *writer) contain(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = w.b.setFatal(fmt.Errorf("%w: bbolt panicked (file corrupt while open?): %v", ErrFatal, p))
			w.b.poisoned.Store(true) // after setFatal: readers that see it find the error
		}
	}()
	return fn()
}

// finish answers the requests of t after its commit returned err, and
// returns err as the callers see it.
func (w *writer) finish(t *wtx, err error) error {
	b := w.b
	if err == nil {
		w.st = t.st
		b.laterAcked.Store(int64(len(w.laterAcks))) // with the count they were taken from
		b.publish(t.st)
		b.commits.Add(1)
		b.fsyncs.Add(2) // bbolt: data pages, then the meta page
		b.appends.Add(uint64(t.records))
		b.acks.Add(uint64(len(t.acked)))
		for _, r := range t.waiting {
			if r.op == opAck {
				b.acks.Add(uint64(len(r.seqs)))
			}
		}
		if w.degraded || !w.failedAt.IsZero() {
			b.log.Info("buffer: commits succeed again", "path", b.path)
		}
		if t.dropped > 0 {
			b.log.Warn("buffer: dropped the oldest dead letters to stay within the bound",
				"path", b.path, "dropped", t.dropped, "kept", t.st.deadN)
		}
		w.degraded, w.full, w.failedAt = false, false, time.Time{}
		w.dirty = w.dirty || t.deletes > 0
		b.forget(t)
		for _, r := range t.waiting {
			r.reply()
		}
		if t.records > 0 {
			b.wake()
		}
		return nil
	}

	err = w.classify(err)
	w.st.rejectedFull += t.rejects
	for _, r := range t.taken {
		if r.answered || r.op == opPurge {
			continue // Interval answers; purge answers itself
		}
		r.err = err
		if r.op == opAck {
			w.retryAcks = append(w.retryAcks, r.seqs...)
		}
		r.reply()
	}
	w.retryAcks = append(w.retryAcks, t.acked...)
	w.retryDead = append(w.retryDead, t.dead...)
	if w.fatal != nil {
		if len(t.held) > 0 {
			b.log.Error("buffer: appends already acknowledged (durability: interval) are lost with the failed commit",
				"path", b.path, "lost", len(t.held), "err", err)
		}
		w.retryAcks, w.retryDead = nil, nil
		return err
	}
	// Interval appends that were answered keep their seqs and go into the
	// next transaction.
	w.held = append(w.held, t.held...)
	w.degraded = true
	w.full = errors.Is(err, ErrDiskFull)
	if now := time.Now(); now.Sub(w.failedAt) > time.Minute {
		b.log.Error("buffer: commit failed; appends fail until it succeeds", "path", b.path, "err", err)
		w.failedAt = now
	}
	return err
}

// classify maps a commit error to the error the callers get, and makes the
// buffer fatal on EIO.
func (w *writer) classify(err error) error {
	b := w.b
	switch {
	case errors.Is(err, ErrFatal):
		w.fatal = b.setFatal(err)
		return w.fatal
	case errors.Is(err, syscall.EIO), strings.Contains(err.Error(), syscall.EIO.Error()):
		// bbolt wraps some errors with %s: match the text as well.
		w.fatal = b.setFatal(fmt.Errorf("%w: %s: %w", ErrFatal, b.path, err))
		return w.fatal
	case errors.Is(err, syscall.ENOSPC), strings.Contains(err.Error(), syscall.ENOSPC.Error()),
		errors.Is(err, berrors.ErrMaxSizeReached):
		err = fmt.Errorf("%w: %s: %w", ErrDiskFull, b.path, err)
	default:
		err = fmt.Errorf("buffer: commit %s: %w", b.path, err)
	}
	b.noteError(err)
	return err
}

// failBegin answers first when no transaction could be started.
func (w *writer) failBegin(first *request, err error) {
	if errors.Is(err, errCorrupt) {
		err = fmt.Errorf("%w: %w", ErrFatal, err)
	}
	err = w.classify(err)
	if first != nil && first.take() {
		first.err = err
		first.reply()
	}
}

// refuse answers r with the fatal error.
func (w *writer) refuse(r *request) {
	if r != nil && r.take() {
		r.err = w.fatal
		r.reply()
	}
}
