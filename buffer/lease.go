package buffer

import "context"

// lease is the delivery state of a record that Lease must skip.
type lease uint8

const (
	leased lease = 1 + iota // returned by Lease, not yet acked or released
	acking                  // Ack or DeadLetter called, not yet committed
)

// Release returns leased records to the queue (their delivery failed), so
// that Lease returns them again. Seqs that are not leased are ignored.
func (b *Buffer) Release(seqs ...uint64) {
	b.mu.Lock()
	n := 0
	for _, s := range seqs {
		if b.leases[s] == leased {
			delete(b.leases, s)
			n++
		}
	}
	if n > 0 {
		b.leasedTo = [2]uint64{} // released records may lie below it: scan from the start
	}
	b.mu.Unlock()
	if n > 0 {
		b.wake()
	}
}

// Wait blocks until Lease has a record to return, ctx ends or the buffer is
// closed (ErrClosed).
func (b *Buffer) Wait(ctx context.Context) error {
	for {
		b.mu.Lock()
		ch := b.notify
		b.mu.Unlock()
		recs, err := b.Peek(1)
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			return nil
		}
		if b.opt.waiting != nil {
			b.opt.waiting()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.closing:
			return ErrClosed
		}
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
