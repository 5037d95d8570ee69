package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"fieldlink/packet"
)

// Append stores p and returns its sequence number, which it also sets in
// p.Seq (and the buffer's epoch in p.Epoch). It returns when p is durable
// under the policy: with Always, after the commit that holds it and its
// fsyncs; with Interval, as soon as the writer has put it into its open
// transaction. Appends that arrive together share one transaction.
//
// The JSON is rendered (with opt.Values) on the calling goroutine; the
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
	marked := false
	for i, p := range ps {
		if err := r.recs[i].err; err != nil {
			p.Seq, p.Epoch = 0, ""
			errs = append(errs, err)
			continue
		}
		p.Seq, p.Epoch = r.recs[i].seq, b.epoch
		marked = marked || p.ClockUnsynced
	}
	if marked || b.waiting.Load() {
		b.noteClock(ps)
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
	buf := q.AppendJSON(make([]byte, headerSize, headerSize+jsonSizeHint(p)), b.opt.Values)
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

// jsonSizeHint is about the JSON size of p, a little over for most packets,
// so that rendering allocates its buffer once instead of growing it.
func jsonSizeHint(p *packet.Packet) int {
	n := 320 + len(p.SiteID) + len(p.DataType) + len(p.GatewayID) + len(p.DeviceID)
	for _, f := range p.Fields {
		n += len(f.Name) + 24 // quotes, colon, comma, a value of 18 characters
	}
	for _, a := range p.AlarmFields {
		n += len(a) + 3
	}
	return n
}

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
