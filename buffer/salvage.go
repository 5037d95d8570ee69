package buffer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// salvageBatch is how many records salvage inserts per transaction.
const salvageBatch = 4096

// salvage moves the corrupt file aside as <path>.corrupt-<UTC timestamp>,
// creates a fresh buffer file with a new epoch, and copies into it every
// record of the old file that verifies: it reads every page, at every
// plausible page size, and trusts nothing but the records' CRCs. Copies of a
// record in pages bbolt freed are deduped by seq; records below the low
// watermark of the newest state found were deleted (acked or evicted) and
// stay deleted. Records deleted above it (acked out of order) can come back:
// they are delivered again, at least once as always, and the platform
// drops the duplicates.
//
// The loss is logged at Error and counted: it is the records that the
// newest state found says were there and that did not verify, an estimate
// when the newest state is not the last one.
//
// Dead letters are not salvaged: they are not queued data, and their 16-byte
// keys are not records to the scan. Those the newest state counted are added
// to DeadDropped. A record dead-lettered above the low watermark of its
// queue can come back into the queue from a stale copy, like an acked one:
// it is delivered again and, refused again, dead-lettered again.
func (b *Buffer) salvage(ce *corruptError) error {
	start := time.Now()
	f := ce.f
	if f == nil {
		var err error
		if f, err = os.Open(b.path); err != nil {
			return fmt.Errorf("buffer: salvage %s: %w", b.path, err)
		}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("buffer: salvage %s: %w", b.path, err)
	}
	aside := asidePath(b.path, time.Now())
	if err := os.Rename(b.path, aside); err != nil {
		return fmt.Errorf("buffer: move corrupt %s aside: %w", b.path, err)
	}
	if err := syncDir(filepath.Dir(b.path)); err != nil {
		return fmt.Errorf("buffer: move corrupt %s aside: %w", b.path, err)
	}
	b.log.Error("buffer: file corrupt: moved aside, salvaging its records into a new buffer",
		"path", b.path, "aside", aside, "reason", ce.reason)

	nf, _, err := lockFile(b.path, lockTimeout)
	if err != nil {
		return fmt.Errorf("buffer: salvage into %s: %w", b.path, err)
	}
	db, err := bolt.Open(b.path, 0o600, b.boltOptions(nf))
	if err != nil {
		nf.Close()
		return fmt.Errorf("buffer: salvage into %s: %w", b.path, err)
	}
	defer db.Close()

	epoch := newEpoch()
	var st state
	if err := db.Update(func(tx *bolt.Tx) error { return createSchema(tx, epoch, state{low: [2]uint64{1, 1}}) }); err != nil {
		return fmt.Errorf("buffer: salvage into %s: %w", b.path, err)
	}

	// Insert everything that verifies, then delete what lies below the
	// low watermarks, which are only known at the end of the scan.
	var batch []kv
	var dups int64
	flush := func() error {
		err := db.Update(func(tx *bolt.Tx) error {
			for _, r := range batch {
				q := qNormal
				if recordAlarm(r.v) {
					q = qAlarm
				}
				bk := tx.Bucket(queueBuckets[q])
				if bk.Get(r.k) != nil {
					dups++
					continue
				}
				if err := bk.Put(r.k, r.v); err != nil {
					return err
				}
				st.n[q]++
				st.bytes[q] += recordSize(r.v)
			}
			return nil
		})
		batch = batch[:0]
		return err
	}
	res, err := scanRecords(f, fi.Size(), func(k, v []byte) error {
		batch = append(batch, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
		if len(batch) >= salvageBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return fmt.Errorf("buffer: salvage %s: %w", aside, err)
	}

	var stale, upToBest int64
	err = db.Update(func(tx *bolt.Tx) error {
		for q := range queueBuckets {
			bk := tx.Bucket(queueBuckets[q])
			var keys [][]byte
			c := bk.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if btoi(k) >= res.low[q] {
					break
				}
				keys = append(keys, append([]byte(nil), k...))
				st.bytes[q] -= recordSize(v)
			}
			for _, k := range keys {
				if err := bk.Delete(k); err != nil {
					return err
				}
			}
			st.n[q] -= int64(len(keys))
			stale += int64(len(keys))
			if res.hasBest {
				for k, _ := c.First(); k != nil && btoi(k) <= res.best.seq; k, _ = c.Next() {
					upToBest++
				}
			}
		}

		// Carry the counters over, and count the loss.
		old := res.best
		st.evictedMaxBytes, st.evictedMaxAge, st.rejectedFull = old.evictedMaxBytes, old.evictedMaxAge, old.rejectedFull
		st.corrupt, st.compactions, st.lostUncommitted = old.corrupt, old.compactions, old.lostUncommitted
		st.deadLetters, st.deadDropped = old.deadLetters, old.deadDropped+uint64(old.deadN)
		st.salvages = old.salvages + 1
		st.salvageLost = old.salvageLost
		if res.hasBest {
			st.salvageLost += uint64(max(old.n[0]+old.n[1]-upToBest, 0))
		}
		st.gen = old.gen + 1
		// Seqs continue above everything the old file used, so that even
		// without the new epoch no id would be reused.
		st.seq = max(res.maxSeq, b.floor)
		for q := range queueBuckets {
			if k, _ := tx.Bucket(queueBuckets[q]).Cursor().First(); k != nil {
				st.low[q] = btoi(k)
			} else {
				st.low[q] = st.seq + 1
			}
		}
		if err := tx.Bucket(bucketSeq).SetSequence(st.seq); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyState, st.encode())
	})
	if err != nil {
		return fmt.Errorf("buffer: salvage into %s: %w", b.path, err)
	}
	if err := syncDir(filepath.Dir(b.path)); err != nil {
		return fmt.Errorf("buffer: salvage into %s: %w", b.path, err)
	}

	attrs := []any{
		"path", b.path, "aside", aside, "epoch", epoch,
		"salvaged", st.n[0] + st.n[1], "alarms", st.n[qAlarm],
		"bad_records", res.bad, "stale_dropped", stale, "copies", dups, "dead_letters_dropped", res.best.deadN,
		"took", time.Since(start).Round(time.Millisecond),
	}
	if res.hasBest {
		attrs = append(attrs, "lost", st.salvageLost-res.best.salvageLost)
	} else {
		attrs = append(attrs, "lost", "unknown (no state found)")
	}
	b.log.Error("buffer: salvage done: records that did not verify are lost", attrs...)
	b.pruneAside()
	return nil
}

// keepAside is how many corrupt files are kept for inspection; older ones
// are deleted, so that a card that keeps corrupting files does not fill up.
const keepAside = 3

// pruneAside deletes all but the keepAside newest corrupt files of the
// buffer.
func (b *Buffer) pruneAside() {
	names, err := filepath.Glob(b.path + ".corrupt-*")
	if err != nil || len(names) <= keepAside {
		return
	}
	slices.SortFunc(names, func(x, y string) int {
		fx, errx := os.Stat(x)
		fy, erry := os.Stat(y)
		if errx != nil || erry != nil {
			return strings.Compare(x, y)
		}
		return fx.ModTime().Compare(fy.ModTime())
	})
	for _, name := range names[:len(names)-keepAside] {
		if err := os.Remove(name); err == nil {
			b.log.Warn("buffer: deleted an old corrupt file", "path", name)
		}
	}
}

// asidePath returns the name a corrupt file is moved to: path.corrupt-
// <UTC timestamp>, with a counter if that exists already.
func asidePath(path string, now time.Time) string {
	base := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	name := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, os.ErrNotExist) {
			return name
		}
		name = base + "-" + strconv.Itoa(i)
	}
}
