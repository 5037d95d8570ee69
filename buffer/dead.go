package buffer

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// A dead letter's key is 16 bytes: its number in the dead bucket (the
// bucket's NextSequence, so that keys sort in the order records died) then
// the record's seq, both big endian. Salvage's raw scan takes only 8-byte
// keys for records, so it never mistakes a dead letter for a queued record.
//
// Its value is an 8-byte header, the reason and the record's value as it was
// queued:
//
//	0:4    CRC32C of the 16-byte key followed by bytes 4:8+n of the value
//	4      format, deadFormat
//	5      zero
//	6:8    n, the reason's length, big endian (at most maxReason)
//	8:8+n  the reason
//	8+n:   the record's value, unchanged: it still verifies under its seq
//	       (the key's last 8 bytes)
const (
	deadKeySize    = 16
	deadHeaderSize = 8
	deadFormat     = 1

	// maxReason is the most bytes of a reason that are kept: an upstream's
	// error text can carry a whole response body.
	maxReason = 512
)

// deadKey returns the key of the dead letter number n, record seq.
func deadKey(n, seq uint64) []byte {
	k := make([]byte, deadKeySize)
	binary.BigEndian.PutUint64(k, n)
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

// clipReason returns reason cut to at most maxReason bytes, on a rune
// boundary.
func clipReason(reason string) string {
	if len(reason) <= maxReason {
		return reason
	}
	n := maxReason
	for n > 0 && !utf8.RuneStart(reason[n]) {
		n--
	}
	return reason[:n]
}

// sealDead returns the value of the dead letter k: reason (clipped) and a
// copy of the record's value v.
func sealDead(k []byte, reason string, v []byte) []byte {
	reason = clipReason(reason)
	n := len(reason)
	d := make([]byte, deadHeaderSize+n+len(v))
	d[4] = deadFormat
	binary.BigEndian.PutUint16(d[6:8], uint16(n))
	copy(d[deadHeaderSize:], reason)
	copy(d[deadHeaderSize+n:], v)
	binary.BigEndian.PutUint32(d[0:4], deadCRC(k, d[:deadHeaderSize+n]))
	return d
}

// deadCRC returns the checksum of a dead letter with key k whose header and
// reason are h.
func deadCRC(k, h []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, k), castagnoli, h[4:])
}

// splitDead returns the reason and the record's value of the dead letter
// stored under k as v, or false when its header and reason do not verify.
// The record's value is not checked.
func splitDead(k, v []byte) (reason, rec []byte, ok bool) {
	if len(k) != deadKeySize || len(v) < deadHeaderSize || v[4] != deadFormat {
		return nil, nil, false
	}
	end := deadHeaderSize + int(binary.BigEndian.Uint16(v[6:8]))
	if end > len(v) || binary.BigEndian.Uint32(v[0:4]) != deadCRC(k, v[:end]) {
		return nil, nil, false
	}
	return v[deadHeaderSize:end], v[end:], true
}

// validDead reports whether k and v form a dead letter that verifies, its
// record included.
func validDead(k, v []byte) bool {
	_, rec, ok := splitDead(k, v)
	return ok && validRecord(k[8:], rec)
}

// decodeDead returns the record and the reason of the dead letter stored
// under k as v, copied out of v, or false when it does not verify.
func decodeDead(k, v []byte) (Record, string, bool) {
	reason, rec, ok := splitDead(k, v)
	if !ok {
		return Record{}, "", false
	}
	r, ok := decodeRecord(k[8:], rec)
	return r, string(reason), ok
}

// deadSize is what a dead letter counts against the dead bucket's bound.
func deadSize(k, v []byte) int64 { return int64(len(k) + len(v)) }

// DeadLetter moves the records seqs, leased or not, out of the queue into
// the dead-letter bucket, with reason (an upstream refused them for good: an
// HTTP 4xx, say), in one transaction. They leave Len and Bytes like acked
// records, are never delivered again, do not count against MaxBytes and are
// not evicted for it; EachDead exports them with their reason, PurgeDead
// deletes them. The reason is cut to 512 bytes. Unknown seqs (acked,
// evicted, purged, dead already) are ignored. Each moved record is counted
// in Stats.DeadLetters; beyond 10,000 dead letters or 16 MiB of them, the
// oldest are dropped and counted in Stats.DeadDropped.
//
// Durability and errors are Ack's: the move is grouped with appends and
// follows the durability policy, the records are not delivered again even
// before it commits, and if the commit fails (ErrDiskFull) DeadLetter
// returns the error and the buffer retries the move by itself.
func (b *Buffer) DeadLetter(reason string, seqs ...uint64) error {
	return b.settle(&request{op: opDeadLetter, reason: clipReason(reason)}, seqs)
}

// PurgeDead deletes every dead letter and returns how many it deleted. The
// counters (Stats.DeadLetters, DeadDropped) are kept.
func (b *Buffer) PurgeDead() (int, error) {
	if err := b.usable(); err != nil {
		return 0, err
	}
	r := &request{op: opPurgeDead, done: make(chan struct{})}
	if err := b.send(context.Background(), r); err != nil {
		return 0, err
	}
	<-r.done
	if r.err != nil {
		return 0, r.err
	}
	return r.n, nil
}

// EachDead calls fn for every dead letter, with its reason, oldest (first
// dead-lettered) first, until fn returns an error, which EachDead returns
// (for `gateway buffer export`). Like Each, it reads in short transactions:
// dead letters added or dropped meanwhile may or may not be visited. A dead
// letter that fails its CRC is skipped, deleted and counted in
// Stats.Corrupt.
func (b *Buffer) EachDead(fn func(Record, string) error) error {
	type dead struct {
		r      Record
		reason string
	}
	var after []byte // the last key visited
	for {
		var recs []dead
		var bad [][]byte
		done := true
		err := b.view(func(tx *bolt.Tx) error {
			d := tx.Bucket(bucketDead)
			if d == nil {
				return nil
			}
			c := d.Cursor()
			k, v := c.First()
			if after != nil {
				if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			for ; k != nil; k, v = c.Next() {
				if len(recs) >= eachChunk {
					done = false
					break
				}
				after = append(after[:0], k...)
				r, reason, ok := decodeDead(k, v)
				if !ok {
					bad = append(bad, append([]byte(nil), k...))
					continue
				}
				recs = append(recs, dead{r, reason})
			}
			return nil
		})
		if err != nil {
			return err
		}
		b.reportCorruptDead(bad)
		for _, d := range recs {
			if err := fn(d.r, d.reason); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}

// reportCorruptDead is reportCorrupt for the dead letters stored under
// keys.
func (b *Buffer) reportCorruptDead(keys [][]byte) {
	if len(keys) == 0 {
		return
	}
	b.log.Error("buffer: dead letters fail their CRC; deleting them", "path", b.path, "dead_letters", len(keys))
	b.sendNoWait(&request{op: opDropCorrupt, dead: keys})
}

// deadBatch is the work of one DeadLetter call.
type deadBatch struct {
	reason string
	seqs   []uint64
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
