package buffer

import (
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Stats describes a buffer, for metrics and `gateway buffer stats`.
// Counters marked "since creation" live in the file, survive restarts and
// are carried over by salvage; the others count since Open.
type Stats struct {
	Epoch    string
	Alarms   int   // alarm records stored
	Normal   int   // normal records stored
	Leased   int   // records leased (or acked or dead-lettered, commit pending)
	Bytes    int64 // live record bytes, as MaxBytes counts them
	MaxBytes int64
	FileSize int64 // the bbolt file's size on disk

	OldestSeq, NewestSeq uint64    // of the records stored; 0 when empty
	OldestAt, NewestAt   time.Time // reading times of the oldest and newest stored records
	LastSeq              uint64    // the highest seq ever committed

	Appends uint64 // records appended, since Open
	Acks    uint64 // seqs acked (unknown ones included), since Open
	Commits uint64 // write transactions committed, since Open
	Fsyncs  uint64 // two per commit (data pages, then the meta page), since Open

	EvictedMaxBytes uint64 // evicted to stay within MaxBytes, since creation
	EvictedMaxAge   uint64 // evicted for MaxAge, since creation
	RejectedFull    uint64 // appends rejected with ErrFull, since creation
	Corrupt         uint64 // records that failed their CRC on read, deleted, since creation
	SalvageLost     uint64 // records a salvage could not recover (estimate), since creation
	Salvages        uint64 // corrupt files moved aside and salvaged, since creation
	Compactions     uint64 // since creation
	LostUncommitted uint64 // Interval appends acknowledged, then lost: their commit failed and no retry could store them, since creation

	DeadLetters uint64 // records moved to the dead-letter bucket by DeadLetter, since creation
	DeadDropped uint64 // dead letters dropped: the oldest, beyond the bound (10,000 or 16 MiB), or by a salvage, since creation
	DeadDepth   int    // dead letters stored (not in Len or Bytes)
	DeadBytes   int64  // their bytes: 16 of key, 8 of header, the reason and the record

	LastError   string // the last write error, "" if none
	LastErrorAt time.Time
}

// Stats returns the buffer's statistics. It reads the first and last
// records of each queue; everything else is kept in memory.
func (b *Buffer) Stats() Stats {
	b.statMu.Lock()
	st := b.st
	s := Stats{
		Epoch:       b.epoch,
		LastError:   b.lastErr,
		LastErrorAt: b.lastErrAt,
	}
	b.statMu.Unlock()

	s.Alarms, s.Normal = int(st.n[qAlarm]), int(st.n[qNormal])
	s.Bytes, s.MaxBytes = st.bytes[0]+st.bytes[1], b.opt.MaxBytes
	s.LastSeq = st.seq
	s.Appends, s.Acks, s.Commits, s.Fsyncs = b.appends.Load(), b.acks.Load(), b.commits.Load(), b.fsyncs.Load()
	s.EvictedMaxBytes, s.EvictedMaxAge, s.RejectedFull = st.evictedMaxBytes, st.evictedMaxAge, st.rejectedFull
	s.Corrupt, s.SalvageLost, s.Salvages = st.corrupt, st.salvageLost, st.salvages
	s.Compactions, s.LostUncommitted = st.compactions, st.lostUncommitted
	s.DeadLetters, s.DeadDropped, s.DeadDepth, s.DeadBytes = st.deadLetters, st.deadDropped, int(st.deadN), st.deadBytes

	// Records AckLater acknowledged wait for no upstream, though their
	// deletion waits for the next commit: not counted as waiting (as Len).
	acked := int(b.laterAcked.Load())
	n := min(acked, s.Normal)
	s.Normal -= n
	s.Alarms -= min(acked-n, s.Alarms)
	b.mu.Lock()
	s.Leased = max(len(b.leases)-acked, 0)
	b.mu.Unlock()
	if fi, err := os.Stat(b.path); err == nil {
		s.FileSize = fi.Size()
	}
	_ = b.view(func(tx *bolt.Tx) error {
		for q := range queueBuckets {
			c := tx.Bucket(queueBuckets[q]).Cursor()
			if k, v := c.First(); k != nil {
				if r, ok := decodeRecord(k, v); ok {
					if s.OldestSeq == 0 || r.Seq < s.OldestSeq {
						s.OldestSeq, s.OldestAt = r.Seq, r.At
					}
				}
			}
			if k, v := c.Last(); k != nil {
				if r, ok := decodeRecord(k, v); ok && r.Seq > s.NewestSeq {
					s.NewestSeq, s.NewestAt = r.Seq, r.At
				}
			}
		}
		return nil
	})
	return s
}
