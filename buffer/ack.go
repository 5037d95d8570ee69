package buffer

import (
	"bytes"
	"context"
	"slices"
)

// Ack deletes the records seqs, after their upstream acknowledged them.
// Unknown seqs (already acked, evicted or purged) are ignored. The deletion
// is grouped with appends and follows the durability policy. Acked records
// are not delivered again, even before the deletion commits; if the commit
// fails (ErrDiskFull), Ack returns the error and the buffer retries the
// deletion by itself.
func (b *Buffer) Ack(seqs ...uint64) error {
	return b.settle(&request{op: opAck}, seqs)
}

// AckLater is Ack for a caller that does not wait for the deletion to be
// on disk: it takes no commit of its own but rides on the next one (the next
// append's; after 10 s without one, or once a thousand are waiting, one of
// their own). It returns once the request is queued. The records are hidden
// from Lease at once. A crash before that commit brings them back, to be
// delivered again, which at-least-once delivery allows; in return a steady
// flow costs the disk one commit per poll cycle instead of two. A failed
// commit is retried by the buffer, as for Ack.
func (b *Buffer) AckLater(seqs ...uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	if err := b.usable(); err != nil {
		return err
	}
	r := &request{op: opAck, later: true, seqs: sortedUnique(seqs)}
	b.mu.Lock()
	for _, seq := range r.seqs {
		b.leases[seq] = acking
	}
	b.mu.Unlock()
	return b.send(context.Background(), r)
}

// settle hides seqs from Lease at once and has the writer delete (or move)
// them as r says, waiting for the outcome: the common path of Ack and
// DeadLetter.
func (b *Buffer) settle(r *request, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	if err := b.usable(); err != nil {
		return err
	}
	r.seqs = sortedUnique(seqs)
	b.mu.Lock()
	for _, seq := range r.seqs {
		b.leases[seq] = acking
	}
	b.mu.Unlock()
	r.done = make(chan struct{})
	if err := b.send(context.Background(), r); err != nil {
		return err
	}
	<-r.done
	return r.err
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

// sortedUnique returns seqs sorted, without duplicates.
func sortedUnique(seqs []uint64) []uint64 {
	s := slices.Clone(seqs)
	slices.Sort(s)
	return slices.Compact(s)
}
