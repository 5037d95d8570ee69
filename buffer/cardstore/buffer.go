package cardstore

import (
	"context"
	"errors"
	"slices"
	"time"

	"fieldlink/buffer"
	"fieldlink/packet"
)

// Volatile marks the seqs of the volatile buffer's records among those
// that Store leases.
const Volatile = uint64(1) << 63

// AppendAll stores ps on the card, or, while the card cannot store them,
// in the volatile buffer. It returns an error only for packets stored in
// neither, and never one that wraps buffer.ErrFatal: the card's failure is
// the store's to handle, not the caller's.
func (s *Store) AppendAll(ctx context.Context, ps ...*packet.Packet) error {
	s.mu.Lock()
	card := s.card
	useCard := card != nil && !s.broken && (s.state.Durable || s.tryCard)
	s.tryCard = false
	s.mu.Unlock()
	rest := ps
	if useCard {
		t0 := time.Now()
		err := card.AppendAll(ctx, ps...)
		took := s.since(t0)
		f := classify(err)
		s.mu.Lock()
		switch {
		case f == OK && err != nil:
			// Not the card's fault (the policy refused packets, ctx
			// ended): as a buffer would.
			s.mu.Unlock()
			return err
		case f == OK && took >= s.opt.SlowAfter:
			s.setLocked(Slow, took, nil)
		case f == OK:
			if s.state.Fault != OK && (s.state.Fault != Slow || took < s.opt.SlowAfter/2) {
				s.setLocked(OK, 0, nil)
				s.wait = s.opt.Retry
			}
		default:
			if errors.Is(err, buffer.ErrFatal) {
				s.broken = true
				s.changedLocked()
			}
			merr := s.openMemLocked() // first: the log says where it is
			s.setLocked(f, 0, err)
			if merr != nil {
				s.mu.Unlock()
				return errors.New(merr.Error())
			}
		}
		s.mu.Unlock()
		if f == OK {
			return nil
		}
		rest = unstored(ps)
	}
	s.mu.Lock()
	mem := s.mem
	if mem == nil {
		if err := s.openMemLocked(); err != nil {
			s.mu.Unlock()
			return errors.New(err.Error())
		}
		mem = s.mem
	}
	s.mu.Unlock()
	if err := mem.AppendAll(ctx, rest...); err != nil {
		return errors.New(err.Error()) // not ErrFatal: the card's buffer is what counts
	}
	return nil
}

// unstored are the packets of ps that did not get a Seq.
func unstored(ps []*packet.Packet) []*packet.Packet {
	var out []*packet.Packet
	for _, p := range ps {
		if p != nil && p.Seq == 0 {
			out = append(out, p)
		}
	}
	return out
}

// Lease returns and leases up to max records of both buffers: alarms first, then by
// reading time, oldest first. The volatile buffer's seqs carry [Volatile].
func (s *Store) Lease(max int) ([]buffer.Record, error) {
	card, mem, _ := s.buffers()
	var out []buffer.Record
	var cerr error
	if card != nil {
		out, cerr = card.Lease(max)
	}
	if mem != nil {
		mr, err := mem.Lease(max)
		if err != nil && cerr == nil && card == nil {
			return nil, err
		}
		for i := range mr {
			mr[i].Seq |= Volatile
		}
		out = append(out, mr...)
	}
	if len(out) == 0 {
		return nil, cerr
	}
	// Alarms first, then by reading time, oldest first: the volatile
	// readings are not starved by a card that gets new ones all the time.
	slices.SortStableFunc(out, func(a, b buffer.Record) int {
		if a.Alarm != b.Alarm {
			if a.Alarm {
				return -1
			}
			return 1
		}
		return a.At.Compare(b.At)
	})
	if len(out) > max {
		s.Release(seqsOf(out[max:])...)
		out = out[:max]
	}
	return out, nil
}

func seqsOf(rs []buffer.Record) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

// split parts seqs into the card's and the volatile buffer's (untagged).
func split(seqs []uint64) (card, mem []uint64) {
	for _, q := range seqs {
		if q&Volatile != 0 {
			mem = append(mem, q&^Volatile)
		} else {
			card = append(card, q)
		}
	}
	return card, mem
}

// each runs fn on the card's and the volatile buffer's share of seqs.
func (s *Store) each(seqs []uint64, fn func(Buffer, []uint64) error) error {
	cs, ms := split(seqs)
	card, mem, _ := s.buffers()
	var errs []error
	if len(cs) > 0 {
		if card == nil {
			// The card's buffer failed after it leased them: they stay on
			// the card and are delivered again once it is back.
			errs = append(errs, errors.New("buffer: the card's buffer is not usable; its records are delivered again once it is"))
		} else {
			errs = append(errs, fn(card, cs))
		}
	}
	if len(ms) > 0 && mem != nil {
		errs = append(errs, fn(mem, ms))
	}
	return errors.Join(errs...)
}

// Ack deletes delivered records.
func (s *Store) Ack(seqs ...uint64) error {
	return s.each(seqs, func(c Buffer, q []uint64) error { return c.Ack(q...) })
}

// AckLater deletes delivered records with the next commit.
func (s *Store) AckLater(seqs ...uint64) error {
	return s.each(seqs, func(c Buffer, q []uint64) error { return c.AckLater(q...) })
}

// Release returns undelivered records to the buffer.
func (s *Store) Release(seqs ...uint64) {
	_ = s.each(seqs, func(c Buffer, q []uint64) error { c.Release(q...); return nil })
}

// DeadLetter moves refused records out of the buffer.
func (s *Store) DeadLetter(reason string, seqs ...uint64) error {
	return s.each(seqs, func(c Buffer, q []uint64) error { return c.DeadLetter(reason, q...) })
}

// Wait blocks until a record can be leased from either buffer, the set of
// buffers changes, or ctx ends.
func (s *Store) Wait(ctx context.Context) error {
	card, mem, changed := s.buffers()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 2)
	n := 0
	for _, b := range []Buffer{card, mem} {
		if b != nil {
			n++
			go func() { done <- b.Wait(wctx) }()
		}
	}
	for ; n > 0; n-- {
		select {
		case err := <-done:
			if err == nil {
				return nil
			}
			// A buffer that failed or closed: wait for the other, or for
			// the store to change.
		case <-changed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Epoch is the card's buffer's epoch, or the volatile one's while the
// card's buffer is not open.
func (s *Store) Epoch() string {
	card, mem, _ := s.buffers()
	if card != nil {
		return card.Epoch()
	}
	if mem != nil {
		return mem.Epoch()
	}
	return ""
}

// Len is how many records both buffers hold.
func (s *Store) Len() int {
	card, mem, _ := s.buffers()
	n := 0
	for _, b := range []Buffer{card, mem} {
		if b != nil {
			n += b.Len()
		}
	}
	return n
}

// Stats are the card's buffer's statistics (the volatile buffer's while
// the card's is not open); ok is false with neither.
func (s *Store) Stats() (buffer.Stats, bool) {
	card, mem, _ := s.buffers()
	switch {
	case card != nil:
		return card.Stats(), true
	case mem != nil:
		return mem.Stats(), true
	}
	return buffer.Stats{}, false
}
