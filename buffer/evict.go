package buffer

import (
	"bytes"
	"fmt"

	"fieldlink/packet"
)

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
func (t *wtx) evictOldest(q int, want int64) int64 {
	n, freed, err := t.deleteFirst(q, func(_, _ []byte, _ int, freed int64) bool { return freed < want })
	if err != nil {
		panic("buffer: delete: " + err.Error())
	}
	t.st.evictedMaxBytes += uint64(n)
	return freed
}

// deleteFirst deletes records from the start of queue q (the oldest) for as
// long as more, asked before each with the count and bytes taken so far,
// says so. It keeps the counts and the leases to forget, and returns how
// many records and bytes it deleted.
func (t *wtx) deleteFirst(q int, more func(k, v []byte, n int, freed int64) bool) (n int, freed int64, err error) {
	var keys [][]byte
	c := t.q[q].Cursor()
	// Collect first, delete after: Cursor.Next after Cursor.Delete can
	// skip a key.
	for k, v := c.First(); k != nil && more(k, v, len(keys), freed); k, v = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
		freed += recordSize(v)
	}
	for _, k := range keys {
		if err := t.q[q].Delete(k); err != nil {
			return 0, 0, err
		}
		t.gone = append(t.gone, btoi(k))
	}
	t.st.n[q] -= int64(len(keys))
	t.st.bytes[q] -= freed
	t.deletes += len(keys)
	return len(keys), freed, nil
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
	if !b.opt.Synced() {
		return // now is not to be trusted: a clock stepped forward would age every record
	}
	cutoff := b.opt.Now().Add(-b.opt.MaxAge).UnixNano()
	mark := []byte(packet.UnsyncedMark)
	for {
		t, err := w.begin()
		if err != nil {
			w.failBegin(nil, err)
			return
		}
		full := false
		err = w.contain(func() error {
			for q := range t.q {
				n, _, err := t.deleteFirst(q, func(k, v []byte, n int, _ int64) bool {
					// A record stamped from an unsynchronised clock has an
					// age nobody can vouch for: it and those after it wait.
					return n < deleteChunk && validRecord(k, v) && recordAt(v) < cutoff && !bytes.Contains(v[headerSize:], mark)
				})
				if err != nil {
					return err
				}
				full = full || n == deleteChunk
				t.st.evictedMaxAge += uint64(n)
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
