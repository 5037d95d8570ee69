package buffer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// opKind is what a request asks of the writer.
type opKind uint8

const (
	opAppend      opKind = iota
	opAck                // delete seqs
	opPurge              // delete every record
	opDropCorrupt        // delete seqs (and dead letters) that fail their CRC; nobody waits
	opDeadLetter         // move seqs to the dead bucket
	opPurgeDead          // delete every dead letter
	opUpdateAux          // set and delete keys of the aux bucket
	opRestamp            // re-stamp the records of clock spans, delete their aux keys
)

// request is one call's work for the writer. The caller fills it in and
// queues it; the writer takes it, fills in the results and closes done.
type request struct {
	op       opKind
	recs     []pending         // opAppend
	seqs     []uint64          // opAck, opDropCorrupt, opDeadLetter
	later    bool              // opAck: AckLater, nobody waits
	reason   string            // opDeadLetter
	auxPut   map[string][]byte // opUpdateAux
	auxDel   []string          // opUpdateAux, opRestamp
	restamp  *restamp          // opRestamp
	dead     [][]byte          // opDropCorrupt: keys of dead letters
	n        int               // opPurge, opPurgeDead: records deleted; opRestamp: re-stamped
	err      error             // the whole request failed
	state    atomic.Int32
	done     chan struct{} // nil for opDropCorrupt
	answered bool          // the writer replied (writer only)
}

// Request states: the caller may cancel a request only before the writer
// takes it.
const (
	reqQueued int32 = iota
	reqTaken
	reqCancelled
)

// take claims r for the writer, or reports false when its caller gave up.
func (r *request) take() bool { return r.state.CompareAndSwap(reqQueued, reqTaken) }

// reply hands r back to its caller, once.
func (r *request) reply() {
	if r.answered {
		return
	}
	r.answered = true
	if r.done != nil {
		close(r.done)
	}
}

// send queues r for the writer.
func (b *Buffer) send(ctx context.Context, r *request) error {
	b.sendMu.RLock()
	defer b.sendMu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	select {
	case b.reqs <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await waits for the writer to answer r, or for ctx to end; then it
// cancels r if the writer has not taken it yet.
func (b *Buffer) await(ctx context.Context, r *request) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqCancelled) {
			return ctx.Err()
		}
		return fmt.Errorf("buffer: gave up waiting (the packet may be stored): %w", ctx.Err())
	}
}

// sendNoWait queues r for the writer unless the queue is full or closed.
func (b *Buffer) sendNoWait(r *request) {
	b.sendMu.RLock()
	defer b.sendMu.RUnlock()
	if b.closed {
		return
	}
	select {
	case b.reqs <- r:
	default:
	}
}

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

// wtx is one write transaction of the writer.
type wtx struct {
	tx      *bolt.Tx
	q       [2]*bolt.Bucket
	seqB    *bolt.Bucket
	meta    *bolt.Bucket
	deadB   *bolt.Bucket // nil until needed when the file has none (see deadBucket)
	st      state        // working copy of the state
	records int          // records appended
	deletes int          // records deleted
	gone    []uint64
	taken   []*request // every request of this transaction
	waiting []*request // answered after the commit
	held    []held     // Interval appends answered before the commit
	acked   []uint64   // Interval acks answered before the commit
	dead    []deadBatch
	dropped int // dead letters dropped to stay within the bound
	rejects uint64
	purge   *request
}

// begin starts a write transaction.
func (w *writer) begin() (*wtx, error) {
	var tx *bolt.Tx
	err := w.contain(func() (err error) {
		tx, err = w.b.db.Begin(true)
		return err
	})
	if err != nil {
		return nil, err
	}
	t := &wtx{tx: tx, st: w.st}
	t.meta = tx.Bucket(bucketMeta)
	t.seqB = tx.Bucket(bucketSeq)
	for q, name := range queueBuckets {
		t.q[q] = tx.Bucket(name)
		// Keys only ever grow: fill pages to the brim (bbolt does not
		// persist FillPercent; it is set on every transaction).
		t.q[q].FillPercent = 1.0
	}
	if t.meta == nil || t.seqB == nil || t.q[0] == nil || t.q[1] == nil {
		_ = tx.Rollback()
		return nil, corruptf("buffer buckets missing")
	}
	if t.deadB = tx.Bucket(bucketDead); t.deadB != nil {
		t.deadB.FillPercent = 1.0
	}
	// Seqs handed out by a transaction that then failed are never reused.
	if t.seqB.Sequence() < w.lastIssued {
		if err := t.seqB.SetSequence(w.lastIssued); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	return t, nil
}

// batch runs one transaction: first (nil for a retry), everything queued
// behind it (Always) or everything that arrives within SyncEvery (Interval),
// up to maxBatch records. It reports whether the queue was closed.
func (w *writer) batch(first *request) (closed bool) {
	b := w.b
	if w.fatal != nil {
		w.refuse(first)
		return false
	}
	if w.full && len(w.retryAcks)+len(w.retryDead)+len(w.laterAcks) > 0 {
		w.freeFirst()
	}
	t, err := w.begin()
	if err != nil {
		w.failBegin(first, err)
		return false
	}
	// An aux update is waited on (the downlink writes to a device only
	// once its command is recorded): it is committed at once, with
	// whatever queued with it, whatever the durability.
	interval := b.opt.Durability == Interval && !w.degraded && first != nil && first.op != opUpdateAux
	err = w.contain(func() error {
		w.applyRetries(t)
		if first != nil {
			w.apply(t, first, interval)
		}
		if !interval {
			yielded := false
			for t.records < maxBatch && t.purge == nil {
				select {
				case r, ok := <-b.reqs:
					if !ok {
						closed = true
						return nil
					}
					w.apply(t, r, interval)
					continue
				default:
				}
				if !yielded {
					// Appenders woken by the last commit may be about to
					// queue again: let them, once, before committing.
					yielded = true
					runtime.Gosched()
					continue
				}
				break
			}
			return nil
		}
		deadline := time.NewTimer(b.opt.SyncEvery)
		defer deadline.Stop()
		for t.records < maxBatch && t.purge == nil {
			select {
			case r, ok := <-b.reqs:
				if !ok {
					closed = true
					return nil
				}
				w.apply(t, r, interval)
				if r.op == opUpdateAux {
					return nil
				}
			case <-deadline.C:
				return nil
			}
		}
		return nil
	})
	if err == nil {
		err = w.commit(t)
	} else {
		_ = w.contain(func() error { return t.tx.Rollback() })
	}
	w.finish(t, err)
	if t.purge != nil {
		w.purge(t.purge)
	}
	return closed
}

// apply does r's work in t. Interval appends and acks are answered at once;
// the rest wait for the commit.
func (w *writer) apply(t *wtx, r *request, interval bool) {
	if !r.take() {
		return
	}
	t.taken = append(t.taken, r)
	switch r.op {
	case opAppend:
		for i := range r.recs {
			w.append(t, &r.recs[i])
		}
		if interval {
			for _, p := range r.recs {
				if p.err == nil {
					t.held = append(t.held, held{p.alarm, p.seq, p.val})
				}
			}
			r.reply()
			return
		}
	case opAck:
		for _, seq := range r.seqs {
			t.ack(seq)
		}
		if interval || r.later {
			t.acked = append(t.acked, r.seqs...)
			r.reply()
			return
		}
	case opDropCorrupt:
		for _, seq := range r.seqs {
			t.dropCorrupt(seq)
		}
		for _, k := range r.dead {
			t.dropCorruptDead(k)
		}
		return
	case opDeadLetter:
		w.deadLetter(t, deadBatch{r.reason, r.seqs})
		if interval {
			r.reply()
			return
		}
	case opPurgeDead:
		r.n = t.purgeDead()
	case opUpdateAux:
		t.updateAux(r.auxPut, r.auxDel)
	case opRestamp:
		r.n = t.restamp(r.restamp)
		t.updateAux(nil, r.auxDel)
	case opPurge:
		t.purge = r
		return
	}
	t.waiting = append(t.waiting, r)
}

// freeFirst commits the deletions of failed commits (acks, AckLater's,
// dead letters) in a transaction of their own, before the next appends, when
// the last commit found the disk full: with no record in it, it may use the
// reserve (see bound), and the pages it frees make room for the appends.
func (w *writer) freeFirst() {
	t, err := w.begin()
	if err != nil {
		w.failBegin(nil, err)
		return
	}
	_ = w.contain(func() error { w.applyDeletes(t); return nil })
	if w.fatal != nil {
		_ = w.contain(func() error { return t.tx.Rollback() })
		w.finish(t, w.fatal)
		return
	}
	w.finish(t, w.commit(t))
}

// applyRetries puts back the answered Interval appends and deletes the
// acks whose transaction failed.
func (w *writer) applyRetries(t *wtx) {
	for _, h := range w.held {
		w.putHeld(t, h)
	}
	w.held = nil
	w.applyDeletes(t)
}

// applyDeletes deletes the acks and AckLater's seqs of failed or earlier
// commits and dead-letters the failed dead letters.
func (w *writer) applyDeletes(t *wtx) {
	for _, seq := range w.retryAcks {
		t.ack(seq)
	}
	t.acked = append(t.acked, w.retryAcks...)
	w.retryAcks = nil
	for _, seq := range w.laterAcks {
		t.ack(seq)
	}
	t.acked = append(t.acked, w.laterAcks...)
	w.laterAcks = w.laterAcks[:0]
	for _, d := range w.retryDead {
		w.deadLetter(t, d)
	}
	w.retryDead = nil
}

// bound sets bbolt's size limit for t, where the file has one (the
// disk-full tests' maxFileSize): a transaction that appends stops
// reserveBytes short of it, one that only deletes may use them all. bbolt
// writes a transaction's new pages before the old ones are free (and the
// freelist with them), so without the reserve a full file could not commit
// the acks that would free it.
func (w *writer) bound(t *wtx) {
	if max := w.b.opt.maxFileSize; max > 0 {
		if t.records > 0 {
			max -= reserveBytes
		}
		w.b.db.MaxSize = max
	}
}

// commit writes the state into t and commits it.
func (w *writer) commit(t *wtx) error {
	w.bound(t)
	return w.contain(func() error {
		st := &t.st
		st.seq = t.seqB.Sequence()
		st.gen++
		st.rejectedFull += t.rejects
		for q := range t.q {
			if k, _ := t.q[q].Cursor().First(); k != nil {
				st.low[q] = btoi(k)
			} else {
				st.low[q] = st.seq + 1
			}
		}
		if err := t.meta.Put(keyState, st.encode()); err != nil {
			return err
		}
		if hook := w.b.opt.failCommit; hook != nil {
			if err := hook(); err != nil {
				_ = t.tx.Rollback()
				return err
			}
		}
		return t.tx.Commit()
	})
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
