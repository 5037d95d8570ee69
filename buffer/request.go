package buffer

import (
	"context"
	"fmt"
	"sync/atomic"
)

// opKind is what a request asks of the writer.
type opKind uint8

const (
	opAppend      opKind = iota
	opAck                // delete seqs
	opPurge              // delete every record
	opDropCorrupt        // delete seqs (and dead letters) that fail their CRC; nobody waits
	opDeadLetter         // move seqs to the dead bucket
	opPurgeDead          // delete every dead letter
	opUpdateAux          // set and delete keys of the aux bucket
	opRestamp            // re-stamp the records of clock spans, delete their aux keys
)

// request is one call's work for the writer. The caller fills it in and
// queues it; the writer takes it, fills in the results and closes done.
type request struct {
	op       opKind
	recs     []pending         // opAppend
	seqs     []uint64          // opAck, opDropCorrupt, opDeadLetter
	later    bool              // opAck: AckLater, nobody waits
	reason   string            // opDeadLetter
	auxPut   map[string][]byte // opUpdateAux
	auxDel   []string          // opUpdateAux, opRestamp
	restamp  *restamp          // opRestamp
	dead     [][]byte          // opDropCorrupt: keys of dead letters
	n        int               // opPurge, opPurgeDead: records deleted; opRestamp: re-stamped
	err      error             // the whole request failed
	state    atomic.Int32
	done     chan struct{} // nil for opDropCorrupt
	answered bool          // the writer replied (writer only)
}

// Request states: the caller may cancel a request only before the writer
// takes it.
const (
	reqQueued int32 = iota
	reqTaken
	reqCancelled
)

// take claims r for the writer, or reports false when its caller gave up.
func (r *request) take() bool { return r.state.CompareAndSwap(reqQueued, reqTaken) }

// reply hands r back to its caller, once.
func (r *request) reply() {
	if r.answered {
		return
	}
	r.answered = true
	if r.done != nil {
		close(r.done)
	}
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
