package buffer

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

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

// putAux sets key in the aux bucket, which the first call creates.
func (t *wtx) putAux(key string, val []byte) {
	b, err := t.tx.CreateBucketIfNotExists(bucketAux)
	if err != nil {
		panic("buffer: aux bucket: " + err.Error())
	}
	if err := b.Put([]byte(key), val); err != nil {
		panic("buffer: aux put: " + err.Error())
	}
}
