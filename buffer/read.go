package buffer

import (
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// Lease returns up to max records that are not leased, in delivery order
// (alarms first, oldest first, then the normal records in Options.Order),
// and leases them. A leased record is not returned again until Release, or
// until the buffer is reopened; Ack deletes it.
//
// Only records whose commit has completed are returned. A record that fails
// its CRC is skipped, deleted and counted in Stats.Corrupt.
func (b *Buffer) Lease(max int) ([]Record, error) { return b.read(max, true) }

// Peek returns what Lease would return, without leasing it.
func (b *Buffer) Peek(max int) ([]Record, error) { return b.read(max, false) }

func (b *Buffer) read(max int, lease bool) ([]Record, error) {
	if max <= 0 {
		return nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	skip := func(seq uint64) bool { _, ok := b.leases[seq]; return ok }
	durable := b.durable.Load()
	var recs []Record
	var bad []uint64
	// A scan going up may start after leasedTo: everything at or below it
	// is leased (or gone), so a deep window of deliveries in flight does
	// not make every Lease, Peek and Wait walk past all of them.
	after := b.leasedTo
	reverse := b.opt.Order == NewestFirst
	if reverse {
		after[qNormal] = 0
	}
	var last [2]uint64
	err := b.view(func(tx *bolt.Tx) error {
		recs, bad, last[qAlarm], _ = scanQueue(tx, qAlarm, false, after[qAlarm], durable, max, skip, recs, bad)
		recs, bad, last[qNormal], _ = scanQueue(tx, qNormal, reverse, after[qNormal], durable, max, skip, recs, bad)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if lease {
		for _, r := range recs {
			b.leases[r.Seq] = leased
		}
		b.leasedTo[qAlarm] = last[qAlarm]
		if !reverse {
			b.leasedTo[qNormal] = last[qNormal]
		}
	}
	b.reportCorrupt(bad)
	return recs, nil
}

// scanQueue appends to recs the records of queue q, up to len(recs) = max,
// going up from the oldest or (reverse) down from the newest, starting after
// seq after (0: from the start), never above durable, skipping the seqs
// skip reports. It returns the last seq visited and whether the queue has
// no more records in that direction.
func scanQueue(tx *bolt.Tx, q int, reverse bool, after, durable uint64, max int, skip func(uint64) bool,
	recs []Record, bad []uint64) ([]Record, []uint64, uint64, bool) {
	c := tx.Bucket(queueBuckets[q]).Cursor()
	var k, v []byte
	switch {
	case !reverse && after == 0:
		k, v = c.First()
	case !reverse:
		k, v = c.Seek(itob(after + 1))
	default:
		from := durable
		if after != 0 {
			from = min(after-1, durable)
		}
		if k, v = c.Seek(itob(from)); k == nil {
			k, v = c.Last()
		} else if btoi(k) > from {
			k, v = c.Prev()
		}
	}
	last := after
	for ; k != nil; k, v = step(c, reverse) {
		if len(recs) >= max {
			return recs, bad, last, false
		}
		if len(k) != keySize {
			continue
		}
		seq := btoi(k)
		if seq > durable {
			if reverse {
				continue
			}
			break
		}
		last = seq
		if skip != nil && skip(seq) {
			continue
		}
		r, ok := decodeRecord(k, v)
		if !ok {
			bad = append(bad, seq)
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad, last, true
}

func step(c *bolt.Cursor, reverse bool) ([]byte, []byte) {
	if reverse {
		return c.Prev()
	}
	return c.Next()
}

// view runs fn in a read transaction, with bbolt's panics and memory faults
// contained: one means the file went bad while open, which is fatal.
func (b *Buffer) view(fn func(*bolt.Tx) error) (err error) {
	b.dbMu.RLock()
	defer b.dbMu.RUnlock()
	if b.db == nil {
		return ErrClosed
	}
	if b.poisoned.Load() {
		return *b.fatal.Load()
	}
	defer func() {
		if p := recover(); p != nil {
			err = b.setFatal(fmt.Errorf("%w: bbolt panicked reading %s (file corrupt while open?): %v", ErrFatal, b.path, p))
			b.poisoned.Store(true) // after setFatal: readers that see it find the error
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return b.db.View(fn)
}

// eachChunk is how many records Each reads per read transaction: short
// transactions, so that a slow fn does not pin pages and grow the file.
const eachChunk = 512

// Each calls fn for every record, leased or not, in delivery order, until
// fn returns an error, which Each returns (for `gateway buffer export`). It
// reads in short transactions, so records appended meanwhile may or may not
// be visited, and records acked meanwhile may still be.
func (b *Buffer) Each(fn func(Record) error) error {
	durable := b.durable.Load()
	for _, part := range []struct {
		q       int
		reverse bool
	}{{qAlarm, false}, {qNormal, b.opt.Order == NewestFirst}} {
		var after uint64
		for {
			var recs []Record
			var bad []uint64
			var done bool
			err := b.view(func(tx *bolt.Tx) error {
				recs, bad, after, done = scanQueue(tx, part.q, part.reverse, after, durable, eachChunk, nil, nil, nil)
				return nil
			})
			if err != nil {
				return err
			}
			b.reportCorrupt(bad)
			for _, r := range recs {
				if err := fn(r); err != nil {
					return err
				}
			}
			if done || (part.reverse && after <= 1) {
				break
			}
		}
	}
	return nil
}
