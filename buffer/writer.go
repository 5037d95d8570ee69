package buffer

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
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
	opPutAux             // set one key of the aux bucket
)

// request is one call's work for the writer. The caller fills it in and
// queues it; the writer takes it, fills in the results and closes done.
type request struct {
	op       opKind
	recs     []pending // opAppend
	seqs     []uint64  // opAck, opDropCorrupt, opDeadLetter
	reason   string    // opDeadLetter; opPutAux: the key
	aux      []byte    // opPutAux: the value
	dead     [][]byte  // opDropCorrupt: keys of dead letters
	n        int       // opPurge, opPurgeDead: records deleted
	err      error     // the whole request failed
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

// pending is one packet of an append, rendered by the caller.
type pending struct {
	alarm bool
	at    int64  // reading time, Unix nanoseconds
	buf   []byte // headerSize bytes of room, then the JSON with "Seq":0
	seqAt int    // index in buf of that 0
	seq   uint64 // result
	err   error  // result: rejected (ErrFull)
	val   []byte // the record, once stored
}

// held is a record of an Interval append that was answered but whose
// commit failed: the writer keeps it, with its seq, and puts it again in the
// next transaction.
type held struct {
	alarm bool
	seq   uint64
	val   []byte
}

// deadBatch is the work of one DeadLetter call.
type deadBatch struct {
	reason string
	seqs   []uint64
}

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

// writer is the goroutine that owns every write transaction.
type writer struct {
	b          *Buffer
	st         state  // as committed (plus counters that ride on the next commit)
	lastIssued uint64 // the highest seq handed out, committed or not
	retryAcks  []uint64
	retryDead  []deadBatch // dead letters whose commit failed
	held       []held      // Interval appends answered, not yet committed (after a failed commit)
	degraded   bool        // the last commit failed: commit every batch at once until one succeeds
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
	for {
		if w.dirty {
			w.maybeCompact()
		}
		if w.retrying() && w.fatal == nil {
			retry.Reset(retryDelay)
		}
		select {
		case r, ok := <-b.reqs:
			if !ok {
				w.shutdown()
				return
			}
			if w.batch(r) {
				w.shutdown()
				return
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
	t, err := w.begin()
	if err != nil {
		w.failBegin(first, err)
		return false
	}
	interval := b.opt.Durability == Interval && !w.degraded && first != nil
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
		if interval {
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
	case opPutAux:
		t.putAux(r.reason, r.aux)
	case opPurge:
		t.purge = r
		return
	}
	t.waiting = append(t.waiting, r)
}

// applyRetries puts back the answered Interval appends and deletes the
// acks whose transaction failed.
func (w *writer) applyRetries(t *wtx) {
	for _, h := range w.held {
		w.putHeld(t, h)
	}
	w.held = nil
	for _, seq := range w.retryAcks {
		t.ack(seq)
	}
	t.acked = append(t.acked, w.retryAcks...)
	w.retryAcks = nil
	for _, d := range w.retryDead {
		w.deadLetter(t, d)
	}
	w.retryDead = nil
}

// putHeld stores again a record whose commit failed, under its own seq.
func (w *writer) putHeld(t *wtx, h held) {
	q := qNormal
	if h.alarm {
		q = qAlarm
	}
	size := recordSize(h.val)
	if over := t.st.bytes[0] + t.st.bytes[1] + size - w.b.opt.MaxBytes; over > 0 {
		if err := t.makeRoom(over, h.alarm, w.b.opt.WhenFull); err != nil {
			t.st.lostUncommitted++
			w.b.log.Error("buffer: an acknowledged append (durability: interval) no longer fits and is lost",
				"path", w.b.path, "seq", h.seq, "err", err)
			return
		}
	}
	if err := t.q[q].Put(itob(h.seq), h.val); err != nil {
		panic("buffer: put: " + err.Error())
	}
	t.st.n[q]++
	t.st.bytes[q] += size
	t.records++
	t.held = append(t.held, h)
}

// append stores one packet, making room for it first.
func (w *writer) append(t *wtx, p *pending) {
	opt := &w.b.opt
	q := qNormal
	if p.alarm {
		q = qAlarm
	}
	seq := t.seqB.Sequence() + 1
	// Put the digits of seq in place of the JSON's "0", in the render
	// buffer itself (it has room): the record is allocated once.
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], seq, 10)
	v := slices.Insert(p.buf, p.seqAt+1, d[1:]...)
	v[p.seqAt] = d[0]
	p.buf, p.seqAt = nil, 0 // v owns it now
	size := recordSize(v)

	if size > opt.MaxBytes {
		p.err = fmt.Errorf("%w: a %d-byte record exceeds max_bytes %d", ErrFull, size, opt.MaxBytes)
		t.rejects++
		return
	}
	if over := t.st.bytes[0] + t.st.bytes[1] + size - opt.MaxBytes; over > 0 {
		if err := t.makeRoom(over, p.alarm, opt.WhenFull); err != nil {
			p.err = err
			t.rejects++
			return
		}
	}
	w.reserve(seq)
	if s, err := t.seqB.NextSequence(); err != nil || s != seq {
		panic(fmt.Sprintf("buffer: NextSequence = %d, %v; want %d", s, err, seq))
	}
	k := itob(seq)
	sealRecord(k, v, p.alarm, p.at)
	if err := t.q[q].Put(k, v); err != nil {
		panic("buffer: put: " + err.Error()) // only for bad keys or values, which these are not
	}
	t.st.n[q]++
	t.st.bytes[q] += size
	t.records++
	p.seq, p.val = seq, v
	w.lastIssued = max(w.lastIssued, seq)
}

// makeRoom evicts records to free over bytes for a new record, or says why
// it may not.
func (t *wtx) makeRoom(over int64, alarm bool, when WhenFull) error {
	if !alarm && when == RejectNew {
		return fmt.Errorf("%w: max_bytes reached (when_full: reject_new)", ErrFull)
	}
	evictable := t.st.bytes[qNormal]
	if alarm {
		evictable += t.st.bytes[qAlarm]
	}
	if over > evictable {
		return fmt.Errorf("%w: max_bytes reached and only alarms are left to evict", ErrFull)
	}
	over -= t.evictOldest(qNormal, over)
	if over > 0 {
		t.evictOldest(qAlarm, over)
	}
	return nil
}

// evictOldest deletes the oldest records of queue q until want bytes are
// freed, and returns the bytes freed.
func (t *wtx) evictOldest(q int, want int64) (freed int64) {
	var keys [][]byte
	c := t.q[q].Cursor()
	// Collect first, delete after: Cursor.Next after Cursor.Delete can
	// skip a key.
	for k, v := c.First(); k != nil && freed < want; k, v = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
		freed += recordSize(v)
	}
	for _, k := range keys {
		if err := t.q[q].Delete(k); err != nil {
			panic("buffer: delete: " + err.Error())
		}
		t.gone = append(t.gone, btoi(k))
	}
	t.st.n[q] -= int64(len(keys))
	t.st.bytes[q] -= freed
	t.st.evictedMaxBytes += uint64(len(keys))
	t.deletes += len(keys)
	return freed
}

// ack deletes the record seq, wherever it is; an unknown seq is ignored.
// The normal queue is looked in first (most acks are there), and the
// record is found and deleted with one cursor, one tree search.
func (t *wtx) ack(seq uint64) {
	k := itob(seq)
	for _, q := range [2]int{qNormal, qAlarm} {
		c := t.q[q].Cursor()
		if ck, v := c.Seek(k); ck != nil && bytes.Equal(ck, k) {
			size := recordSize(v)
			if err := c.Delete(); err != nil {
				panic("buffer: delete: " + err.Error())
			}
			t.st.n[q]--
			t.st.bytes[q] -= size
			t.deletes++
			return
		}
	}
}

// dropCorrupt deletes the record seq if it (still) fails its CRC.
func (t *wtx) dropCorrupt(seq uint64) {
	k := itob(seq)
	for q := range t.q {
		if v := t.q[q].Get(k); v != nil && !validRecord(k, v) {
			size := recordSize(v)
			if err := t.q[q].Delete(k); err != nil {
				panic("buffer: delete: " + err.Error())
			}
			t.st.n[q]--
			t.st.bytes[q] -= size
			t.st.corrupt++
			t.deletes++
			t.gone = append(t.gone, seq)
		}
	}
}

// deadLetter moves the records of d to the dead bucket, then drops the
// oldest dead letters beyond the bound.
func (w *writer) deadLetter(t *wtx, d deadBatch) {
	t.dead = append(t.dead, d)
	for _, seq := range d.seqs {
		t.deadLetter(seq, d.reason)
	}
	t.trimDead(w.b.opt.deadMax, w.b.opt.deadMaxBytes)
}

// deadBucket returns the dead bucket, creating it in t if the file has none
// yet (files of older versions).
func (t *wtx) deadBucket() *bolt.Bucket {
	if t.deadB == nil {
		d, err := t.tx.CreateBucketIfNotExists(bucketDead)
		if err != nil {
			panic("buffer: create the dead bucket: " + err.Error()) // only if the tx or the name were bad
		}
		d.FillPercent = 1.0 // keys only ever grow
		t.deadB = d
	}
	return t.deadB
}

// deadLetter moves the record seq, wherever it is, to the dead bucket with
// reason; an unknown seq is ignored, a record that fails its CRC is dropped
// as corrupt.
func (t *wtx) deadLetter(seq uint64, reason string) {
	k := itob(seq)
	for q := range t.q {
		v := t.q[q].Get(k)
		if v == nil {
			continue
		}
		if !validRecord(k, v) {
			t.dropCorrupt(seq)
			return
		}
		size := recordSize(v)
		d := t.deadBucket()
		n, err := d.NextSequence()
		if err != nil {
			panic("buffer: dead NextSequence: " + err.Error())
		}
		dk := deadKey(n, seq)
		dv := sealDead(dk, reason, v) // a copy: v dies with the delete
		if err := d.Put(dk, dv); err != nil {
			panic("buffer: put: " + err.Error())
		}
		if err := t.q[q].Delete(k); err != nil {
			panic("buffer: delete: " + err.Error())
		}
		t.st.n[q]--
		t.st.bytes[q] -= size
		t.st.deadLetters++
		t.st.deadN++
		t.st.deadBytes += deadSize(dk, dv)
		t.deletes++
		return
	}
}

// trimDead drops the oldest dead letters until at most maxN of them, and
// maxBytes of their bytes, are left.
func (t *wtx) trimDead(maxN, maxBytes int64) {
	if t.deadB == nil || (t.st.deadN <= maxN && t.st.deadBytes <= maxBytes) {
		return
	}
	var keys [][]byte
	var freed int64
	c := t.deadB.Cursor()
	k, v := c.First()
	for ; k != nil && (t.st.deadN-int64(len(keys)) > maxN || t.st.deadBytes-freed > maxBytes); k, v = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
		freed += deadSize(k, v)
	}
	empty := k == nil
	for _, k := range keys {
		if err := t.deadB.Delete(k); err != nil {
			panic("buffer: delete: " + err.Error())
		}
	}
	t.st.deadN -= int64(len(keys))
	t.st.deadBytes -= freed
	if empty {
		// The counts cannot drift, but if they did, set them right.
		t.st.deadN, t.st.deadBytes = 0, 0
	}
	t.st.deadDropped += uint64(len(keys))
	t.dropped += len(keys)
	t.deletes += len(keys)
}

// purgeDead deletes every dead letter and returns how many it deleted. The
// dead bucket holds at most maxDead of them: one transaction does.
// putAux sets key in the aux bucket, which the first call creates.
func (t *wtx) putAux(key string, val []byte) {
	b, err := t.tx.CreateBucketIfNotExists(bucketAux)
	if err != nil {
		panic("buffer: aux bucket: " + err.Error())
	}
	if err := b.Put([]byte(key), val); err != nil {
		panic("buffer: aux put: " + err.Error())
	}
}

func (t *wtx) purgeDead() int {
	if t.deadB == nil {
		return 0
	}
	var keys [][]byte
	c := t.deadB.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := t.deadB.Delete(k); err != nil {
			panic("buffer: delete: " + err.Error())
		}
	}
	t.st.deadN, t.st.deadBytes = 0, 0
	t.deletes += len(keys)
	return len(keys)
}

// dropCorruptDead deletes the dead letter k if it (still) fails its CRC.
func (t *wtx) dropCorruptDead(k []byte) {
	if t.deadB == nil {
		return
	}
	if v := t.deadB.Get(k); v != nil && !validDead(k, v) {
		size := deadSize(k, v)
		if err := t.deadB.Delete(k); err != nil {
			panic("buffer: delete: " + err.Error())
		}
		t.st.deadN--
		t.st.deadBytes -= size
		t.st.corrupt++
		t.deletes++
	}
}

// commit writes the state into t and commits it.
func (w *writer) commit(t *wtx) error {
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
		w.degraded, w.failedAt = false, time.Time{}
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

// forget drops the leases of the records that t deleted.
func (b *Buffer) forget(t *wtx) {
	if len(t.acked) == 0 && len(t.gone) == 0 && len(t.waiting) == 0 && len(t.dead) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range t.acked {
		delete(b.leases, s)
	}
	for _, s := range t.gone {
		delete(b.leases, s)
	}
	for _, d := range t.dead {
		for _, s := range d.seqs {
			delete(b.leases, s)
		}
	}
	for _, r := range t.waiting {
		if r.op == opAck {
			for _, s := range r.seqs {
				delete(b.leases, s)
			}
		}
	}
}

// wake tells Wait that records may be available.
func (b *Buffer) wake() {
	b.mu.Lock()
	close(b.notify)
	b.notify = make(chan struct{})
	b.mu.Unlock()
}

// evictAged deletes the records older than MaxAge, in transactions of at
// most deleteChunk records. Records are visited in seq order and the scan of
// a queue stops at its first record young enough: a record read out of time
// order waits for the ones before it.
func (w *writer) evictAged() {
	if w.fatal != nil {
		return
	}
	b := w.b
	cutoff := b.opt.Now().Add(-b.opt.MaxAge).UnixNano()
	for {
		t, err := w.begin()
		if err != nil {
			w.failBegin(nil, err)
			return
		}
		full := false
		err = w.contain(func() error {
			for q := range t.q {
				var keys [][]byte
				var freed int64
				c := t.q[q].Cursor()
				for k, v := c.First(); k != nil && len(keys) < deleteChunk; k, v = c.Next() {
					if !validRecord(k, v) || recordAt(v) >= cutoff {
						break
					}
					keys = append(keys, append([]byte(nil), k...))
					freed += recordSize(v)
				}
				full = full || len(keys) == deleteChunk
				for _, k := range keys {
					if err := t.q[q].Delete(k); err != nil {
						return err
					}
					t.gone = append(t.gone, btoi(k))
				}
				t.st.n[q] -= int64(len(keys))
				t.st.bytes[q] -= freed
				t.st.evictedMaxAge += uint64(len(keys))
				t.deletes += len(keys)
			}
			return nil
		})
		if err == nil && t.deletes == 0 {
			_ = w.contain(func() error { return t.tx.Rollback() })
			return
		}
		if err == nil {
			err = w.commit(t)
		} else {
			_ = w.contain(func() error { return t.tx.Rollback() })
		}
		err = w.finish(t, err)
		if err != nil || !full {
			if err == nil && t.deletes > 0 {
				b.log.Warn("buffer: evicted records older than max_age", "path", b.path, "evicted", t.deletes)
			}
			return
		}
	}
}

// purge deletes every record, in transactions of at most deleteChunk, and
// answers r with the count.
func (w *writer) purge(r *request) {
	b := w.b
	defer r.reply()
	r.n, w.held = len(w.held), nil // answered, never committed: purged too
	for w.fatal == nil {
		t, err := w.begin()
		if err != nil {
			w.failBegin(nil, err)
			break
		}
		err = w.contain(func() error {
			for q := range t.q {
				var keys [][]byte
				var freed int64
				c := t.q[q].Cursor()
				for k, v := c.First(); k != nil && t.deletes+len(keys) < deleteChunk; k, v = c.Next() {
					keys = append(keys, append([]byte(nil), k...))
					freed += recordSize(v)
				}
				for _, k := range keys {
					if err := t.q[q].Delete(k); err != nil {
						return err
					}
					t.gone = append(t.gone, btoi(k))
				}
				t.st.n[q] -= int64(len(keys))
				t.st.bytes[q] -= freed
				t.deletes += len(keys)
			}
			if t.st.n[0]+t.st.n[1] == 0 {
				// The counts cannot drift, but if they did, this is the
				// moment to set them right.
				t.st.bytes = [2]int64{}
			}
			return nil
		})
		if err == nil {
			err = w.commit(t)
		} else {
			_ = w.contain(func() error { return t.tx.Rollback() })
		}
		if err := w.finish(t, err); err != nil {
			r.err = err
			break
		}
		r.n += t.deletes
		if t.deletes < deleteChunk {
			break
		}
	}
	if w.fatal != nil && r.err == nil {
		r.err = w.fatal
	}
	b.mu.Lock()
	for s, l := range b.leases {
		if l == leased {
			delete(b.leases, s)
		}
	}
	b.mu.Unlock()
	if r.n > 0 {
		b.log.Warn("buffer: purged", "path", b.path, "records", r.n)
	}
}

// sortedUnique returns seqs sorted, without duplicates.
func sortedUnique(seqs []uint64) []uint64 {
	s := slices.Clone(seqs)
	slices.Sort(s)
	return slices.Compact(s)
}
