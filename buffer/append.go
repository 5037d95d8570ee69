package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"fieldlink/packet"
)

// Append stores p and returns its sequence number, which it also sets in
// p.Seq (and the buffer's epoch in p.Epoch). It returns when p is durable
// under the policy: with Always, after the commit that holds it and its
// fsyncs; with Interval, as soon as the writer has put it into its open
// transaction. Appends that arrive together share one transaction.
//
// The JSON is rendered (with opt.Encoding) on the calling goroutine; the
// buffer does not keep p, and writes p.Seq and p.Epoch only on success,
// before Append returns.
//
// Errors: ErrFull (rejected by the policy), ErrDiskFull (not durable; try
// again later), ErrFatal (exit), ErrClosed, or ctx's error. When ctx ends
// after the writer took the packet, Append returns ctx's error but the
// packet may still be stored.
func (b *Buffer) Append(ctx context.Context, p *packet.Packet) (seq uint64, err error) {
	if err := b.AppendAll(ctx, p); err != nil {
		return 0, err
	}
	return p.Seq, nil
}

// AppendAll stores ps, in order, in one transaction (a poll cycle's packets,
// say), as Append does for each. It returns nil when all were stored; the
// packets that were stored have Seq and Epoch set, the others come back
// with Seq 0 and no Epoch (whatever they had before), and the error joins
// their errors (errors.Is works on it).
func (b *Buffer) AppendAll(ctx context.Context, ps ...*packet.Packet) error {
	if len(ps) == 0 {
		return nil
	}
	// A packet that was not stored leaves with Seq 0 and no Epoch, whatever
	// it came with: callers tell stored from not stored by its Seq.
	unstored := func(err error) error {
		for _, p := range ps {
			if p != nil {
				p.Seq, p.Epoch = 0, ""
			}
		}
		return err
	}
	if err := b.usable(); err != nil {
		return unstored(err)
	}
	now := b.opt.Now()
	r := &request{op: opAppend, recs: make([]pending, len(ps)), done: make(chan struct{})}
	for i, p := range ps {
		if err := b.render(&r.recs[i], p, now); err != nil {
			return unstored(err)
		}
	}
	if err := b.send(ctx, r); err != nil {
		return unstored(err)
	}
	if err := b.await(ctx, r); err != nil {
		return unstored(err)
	}
	if r.err != nil {
		return unstored(r.err)
	}
	var errs []error
	for i, p := range ps {
		if err := r.recs[i].err; err != nil {
			p.Seq, p.Epoch = 0, ""
			errs = append(errs, err)
			continue
		}
		p.Seq, p.Epoch = r.recs[i].seq, b.epoch
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// seqMarker is where the JSON of a packet with Seq 0 holds its Seq: the
// writer splices the real number in. A JSON string cannot contain this
// text (its quotes would be escaped), so the first match is DataHead's Seq.
var seqMarker = []byte(`,"Seq":0,`)

// render fills in rec for p: the JSON, with room for the header in front,
// rendered on the caller's goroutine so that the writer never reads p.
func (b *Buffer) render(rec *pending, p *packet.Packet, now time.Time) error {
	if p == nil {
		return errors.New("buffer: append: nil packet")
	}
	q := *p
	q.Seq, q.Epoch = 0, b.epoch
	buf := q.AppendJSON(make([]byte, headerSize, headerSize+768), b.opt.Encoding)
	i := bytes.Index(buf[headerSize:], seqMarker)
	if i < 0 {
		return fmt.Errorf("buffer: append: no Seq in the packet's JSON")
	}
	at := p.At
	if at.IsZero() || at.Year() < 1700 || at.Year() > 2200 {
		at = now // UnixNano is only defined from 1678 to 2262
	}
	*rec = pending{alarm: p.Alarm(), at: at.UnixNano(), buf: buf, seqAt: headerSize + i + len(`,"Seq":`)}
	return nil
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

// Ack deletes the records seqs, after their upstream acknowledged them.
// Unknown seqs (already acked, evicted or purged) are ignored. The deletion
// is grouped with appends and follows the durability policy. Acked records
// are not delivered again, even before the deletion commits; if the commit
// fails (ErrDiskFull), Ack returns the error and the buffer retries the
// deletion by itself.
func (b *Buffer) Ack(seqs ...uint64) error {
	return b.settle(&request{op: opAck}, seqs)
}

// settle hides seqs from Next at once and has the writer delete (or move)
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

// MaxAuxSize bounds a PutAux value: the aux bucket is for small state.
const MaxAuxSize = 1 << 20

// PutAux keeps value under key in the buffer file, beside the records, and
// returns once it is committed: state the gateway learnt and wants back
// after a restart (the irlb selector's model), in the one file that is
// already written safely, rather than in files of its own. It survives
// compaction; a salvage of a damaged file does not keep it (it cannot be
// checked), and the next PutAux writes it again.
func (b *Buffer) PutAux(key string, value []byte) error {
	if key == "" || len(value) > MaxAuxSize {
		return fmt.Errorf("buffer: aux %q: key empty or value over %d bytes", key, MaxAuxSize)
	}
	if err := b.usable(); err != nil {
		return err
	}
	r := &request{op: opPutAux, reason: key, aux: append([]byte(nil), value...), done: make(chan struct{})}
	if err := b.send(context.Background(), r); err != nil {
		return err
	}
	<-r.done
	return r.err
}

// Aux returns a copy of the value PutAux kept under key, or nil when there
// is none.
func (b *Buffer) Aux(key string) ([]byte, error) {
	var out []byte
	err := b.view(func(tx *bolt.Tx) error {
		if bk := tx.Bucket(bucketAux); bk != nil {
			if v := bk.Get([]byte(key)); v != nil {
				out = append([]byte{}, v...)
			}
		}
		return nil
	})
	return out, err
}

// Purge deletes every record, keeping the sequence and the epoch, and
// returns how many it deleted (for `gateway buffer purge`). Dead letters
// stay: PurgeDead deletes them.
func (b *Buffer) Purge() (n int, err error) {
	if err := b.usable(); err != nil {
		return 0, err
	}
	r := &request{op: opPurge, done: make(chan struct{})}
	if err := b.send(context.Background(), r); err != nil {
		return 0, err
	}
	<-r.done
	return r.n, r.err
}

// reportCorrupt asks the writer to delete the records seqs, which failed
// their CRC on read. It does not wait, and gives up if the queue is full:
// the next read finds them again.
func (b *Buffer) reportCorrupt(seqs []uint64) {
	if len(seqs) == 0 {
		return
	}
	b.log.Error("buffer: records fail their CRC; deleting them", "path", b.path, "seqs", seqs)
	b.sendNoWait(&request{op: opDropCorrupt, seqs: seqs})
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
