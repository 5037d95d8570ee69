package buffer

import "context"

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

// purge deletes every record, in transactions of at most deleteChunk, and
// answers r with the count.
func (w *writer) purge(r *request) {
	b := w.b
	defer r.reply()
	r.n, w.held = len(w.held), nil // answered, never committed: purged too
	for w.fatal == nil {
		t, err := w.begin()
		if err != nil {
			w.failBegin(nil, err)
			break
		}
		err = w.contain(func() error {
			for q := range t.q {
				if _, _, err := t.deleteFirst(q, func(_, _ []byte, n int, _ int64) bool {
					return t.deletes+n < deleteChunk
				}); err != nil {
					return err
				}
			}
			if t.st.n[0]+t.st.n[1] == 0 {
				// The counts cannot drift, but if they did, this is the
				// moment to set them right.
				t.st.bytes = [2]int64{}
			}
			return nil
		})
		if err == nil {
			err = w.commit(t)
		} else {
			_ = w.contain(func() error { return t.tx.Rollback() })
		}
		if err := w.finish(t, err); err != nil {
			r.err = err
			break
		}
		r.n += t.deletes
		if t.deletes < deleteChunk {
			break
		}
	}
	if w.fatal != nil && r.err == nil {
		r.err = w.fatal
	}
	b.mu.Lock()
	for s, l := range b.leases {
		if l == leased {
			delete(b.leases, s)
		}
	}
	b.mu.Unlock()
	if r.n > 0 {
		b.log.Warn("buffer: purged", "path", b.path, "records", r.n)
	}
}
