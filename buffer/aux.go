package buffer

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// MaxAuxSize bounds one aux value: the aux bucket is for small state.
const MaxAuxSize = 1 << 20

// auxScanChunk is how many keys ScanAux reads per read transaction: short
// transactions, so that a slow fn does not pin pages and grow the file.
const auxScanChunk = 256

// PutAux keeps value under key in the buffer file, beside the records, and
// returns once it is committed: state the gateway learnt and wants back
// after a restart (the irlb selector's model, the downlink's command ids
// and audit log), in the one file that is already written safely, rather
// than in files of its own. It survives compaction; a salvage of a damaged
// file does not keep it (it cannot be checked), and the next PutAux writes
// it again.
func (b *Buffer) PutAux(key string, value []byte) error {
	return b.UpdateAux(map[string][]byte{key: value}, nil)
}

// UpdateAux deletes the keys del and sets the keys of put in the aux bucket,
// all in one transaction, and returns once it is committed: after a crash
// the file holds all of it or none of it. It is committed at once, even
// with Interval durability. A key may not be in both. Keys that are not
// there are not an error to delete.
func (b *Buffer) UpdateAux(put map[string][]byte, del []string) error {
	if len(put) == 0 && len(del) == 0 {
		return nil
	}
	p := make(map[string][]byte, len(put))
	for k, v := range put {
		if err := checkAuxKey(k); err != nil {
			return err
		}
		if len(v) > MaxAuxSize {
			return fmt.Errorf("buffer: aux %q: value of %d bytes, over %d", k, len(v), MaxAuxSize)
		}
		p[k] = append([]byte{}, v...) // not nil: bbolt stores nil as empty anyway
	}
	for _, k := range del {
		if err := checkAuxKey(k); err != nil {
			return err
		}
		if _, ok := p[k]; ok {
			return fmt.Errorf("buffer: aux %q: both set and deleted in one update", k)
		}
	}
	if err := b.usable(); err != nil {
		return err
	}
	r := &request{op: opUpdateAux, auxPut: p, auxDel: append([]string(nil), del...), done: make(chan struct{})}
	if err := b.send(context.Background(), r); err != nil {
		return err
	}
	<-r.done
	return r.err
}

// DeleteAux deletes keys from the aux bucket in one transaction.
func (b *Buffer) DeleteAux(keys ...string) error { return b.UpdateAux(nil, keys) }

// checkAuxKey refuses a key bbolt would refuse inside the writer's
// transaction (where a failed put is fatal).
func checkAuxKey(k string) error {
	if k == "" || len(k) > bolt.MaxKeySize {
		return fmt.Errorf("buffer: aux key of %d bytes: want 1 to %d", len(k), bolt.MaxKeySize)
	}
	return nil
}

// Aux returns a copy of the value kept under key, or nil when there is
// none.
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

// ScanAux calls fn, in key order, for every aux key that starts with
// prefix, with a copy of its value, until fn returns an error, which
// ScanAux returns. It reads in short transactions, so an update made
// meanwhile may or may not be seen (each key at most once, in order).
func (b *Buffer) ScanAux(prefix string, fn func(key string, value []byte) error) error {
	type kv struct {
		k string
		v []byte
	}
	pre := []byte(prefix)
	var after []byte // the last key visited; nil before the first
	for {
		var chunk []kv
		done := true
		err := b.view(func(tx *bolt.Tx) error {
			bk := tx.Bucket(bucketAux)
			if bk == nil {
				return nil
			}
			c := bk.Cursor()
			var k, v []byte
			if after == nil {
				k, v = c.Seek(pre)
			} else if k, v = c.Seek(after); bytes.Equal(k, after) {
				k, v = c.Next()
			}
			for ; k != nil && bytes.HasPrefix(k, pre); k, v = c.Next() {
				if len(chunk) == auxScanChunk {
					done = false
					break
				}
				chunk = append(chunk, kv{string(k), append([]byte{}, v...)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, e := range chunk {
			if err := fn(e.k, e.v); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
		after = []byte(chunk[len(chunk)-1].k)
	}
}

// updateAux deletes del and sets put in the aux bucket, which the first put
// creates.
func (t *wtx) updateAux(put map[string][]byte, del []string) {
	b := t.tx.Bucket(bucketAux)
	for _, k := range del {
		if b == nil {
			break
		}
		if err := b.Delete([]byte(k)); err != nil {
			panic("buffer: aux delete: " + err.Error())
		}
	}
	if len(put) == 0 {
		return
	}
	if b == nil {
		var err error
		if b, err = t.tx.CreateBucket(bucketAux); err != nil {
			panic("buffer: aux bucket: " + err.Error())
		}
	}
	for k, v := range put {
		if err := b.Put([]byte(k), v); err != nil {
			panic("buffer: aux put: " + err.Error())
		}
	}
}

// auxBytes returns the bytes the aux bucket's pages hold, for the writer's
// compaction decision.
func (w *writer) auxBytes() int64 {
	var n int64
	_ = w.contain(func() error {
		return w.b.db.View(func(tx *bolt.Tx) error {
			if bk := tx.Bucket(bucketAux); bk != nil {
				s := bk.Stats()
				n = int64(s.LeafInuse + s.BranchInuse + s.InlineBucketInuse)
			}
			return nil
		})
	})
	return n
}
