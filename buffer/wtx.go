package buffer

import (
	"runtime"
	"time"

	bolt "go.etcd.io/bbolt"
)

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
