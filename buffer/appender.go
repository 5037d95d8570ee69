package buffer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/packet"
)

// Appender takes packets from the pollers into a Buffer so that a poller
// never waits for an fsync: Put only queues, and Run appends whatever
// queued up while the previous commit ran in one AppendAll (group commit).
// A whole poll cycle so shares a commit, and the SD card sees one write
// instead of one per device.
//
// One goroutine runs Run; any number call Put. Close stops it: the owner
// stops the pollers, then calls Close, then closes the Buffer.
type Appender struct {
	b   AppenderBuffer
	opt AppenderOptions
	ch  chan *packet.Packet

	// closeMu is held for reading while Put queues, and for writing by
	// Close while it closes ch: a Put after Close finds closed instead of
	// sending on a closed channel.
	closeMu sync.RWMutex
	closed  bool
	done    chan struct{} // closed when Run returns

	fatal  atomic.Pointer[error]
	stored atomic.Uint64
	failed atomic.Uint64

	full   func()        // tests: Put found the queue full and is about to block
	linger time.Duration // maxLinger; tests set their own
}

// AppenderOptions configures an Appender. The zero value is usable.
type AppenderOptions struct {
	Logger *slog.Logger // nil: slog.Default()
	// OnFatal is called once, from Run's goroutine, when the buffer fails
	// for good (ErrFatal): the process must stop polling and restart.
	OnFatal func()
	// OnStored sees each packet once it is stored, with its Seq and Epoch,
	// from Run's goroutine: it must not block for long.
	OnStored func(*packet.Packet)
}

// Group commit sizes.
const (
	// appenderQueue is how many packets Put queues before it blocks.
	appenderQueue = 4096
	// appenderBatch is the most packets one AppendAll takes.
	appenderBatch = 1024
	// maxLinger is the longest Run holds a batch open for the rest of a
	// poll cycle (packets marked More) before it commits what it has: it
	// bounds the delay a packet takes from a long run of back-to-back
	// polls. Alarms never wait.
	maxLinger = 10 * time.Millisecond
)

// AppenderBuffer is the buffer as an Appender uses it: a [Buffer], or the
// card's buffer with its volatile fallback
// ([fieldlink/buffer/cardstore.Store], the agent's). AppendAll behaves as
// [Buffer.AppendAll]: a stored packet comes back with its Seq set, an
// unstored one with Seq 0.
type AppenderBuffer interface {
	AppendAll(ctx context.Context, ps ...*packet.Packet) error
}

// NewAppender returns an Appender that stores into b. Start its Run.
func NewAppender(b AppenderBuffer, opt AppenderOptions) *Appender {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &Appender{b: b, opt: opt, ch: make(chan *packet.Packet, appenderQueue), done: make(chan struct{}), linger: maxLinger}
}

// Put queues p for Run; it blocks only while 4096 packets are already
// waiting. A Put after Close does not store p: it counts it in Failed and
// logs it at Error (a poller outlived its shutdown), and does not panic. A
// nil p is counted in Failed too (it would fail its whole batch).
func (a *Appender) Put(p *packet.Packet) {
	if p == nil {
		a.failed.Add(1)
		return
	}
	a.closeMu.RLock()
	defer a.closeMu.RUnlock()
	if a.closed {
		a.failed.Add(1)
		a.opt.Logger.Error("buffer: a packet was put after the appender closed; not stored")
		return
	}
	select {
	case a.ch <- p:
		return
	default:
	}
	if a.full != nil {
		a.full()
	}
	a.ch <- p
}

// Close ends Run once every packet queued before it is stored (or failed),
// and waits for Run to return. Run must be running. Close may be called
// more than once.
func (a *Appender) Close() {
	a.closeMu.Lock()
	if !a.closed {
		a.closed = true
		close(a.ch)
	}
	a.closeMu.Unlock()
	<-a.done
}

// Fatal returns the buffer's fatal error, once Run has met one.
func (a *Appender) Fatal() error {
	if e := a.fatal.Load(); e != nil {
		return *e
	}
	return nil
}

// Stored returns how many packets were stored.
func (a *Appender) Stored() uint64 { return a.stored.Load() }

// Failed returns how many packets were not stored: refused by the buffer
// (ErrFull, ErrDiskFull, ErrFatal), queued after a fatal error, or put after
// Close.
func (a *Appender) Failed() uint64 { return a.failed.Load() }

// Run appends until Close. It does not stop with a context: packets polled
// before shutdown are stored before the buffer closes. After a fatal error
// it keeps draining the queue, counting the packets as failed, so that Put
// never blocks on a dead buffer.
func (a *Appender) Run() {
	defer close(a.done)
	batch := make([]*packet.Packet, 0, appenderBatch)
	var lastLog time.Time
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for p := range a.ch {
		batch = append(batch[:0], p)
		alarm := p.Alarm()
		until := time.Now().Add(a.linger)
	drain:
		for len(batch) < appenderBatch {
			select {
			case p, ok := <-a.ch:
				if !ok {
					break drain
				}
				batch = append(batch, p)
				alarm = alarm || p.Alarm()
				continue
			default:
			}
			// The queue is empty. A poll cycle still running (the last
			// packet says More) is waited for, so that its packets share
			// one commit: one write to the card instead of several.
			wait := time.Until(until)
			if !batch[len(batch)-1].More || alarm || wait <= 0 {
				break
			}
			linger.Reset(wait)
			select {
			case p, ok := <-a.ch:
				linger.Stop()
				if !ok {
					break drain
				}
				batch = append(batch, p)
				alarm = alarm || p.Alarm()
			case <-linger.C:
				break drain
			}
		}
		if a.Fatal() != nil {
			a.failed.Add(uint64(len(batch)))
			clear(batch)
			continue
		}
		err := a.b.AppendAll(context.Background(), batch...)
		n := 0
		for _, p := range batch {
			if p.Seq != 0 {
				n++
				if a.opt.OnStored != nil {
					a.opt.OnStored(p)
				}
			}
		}
		// Counters last: once Failed counts a packet of a fatal batch,
		// Fatal reports the error and OnFatal has run.
		switch {
		case err == nil:
		case errors.Is(err, ErrFatal):
			a.fatal.Store(&err)
			if a.opt.OnFatal != nil {
				a.opt.OnFatal()
			}
		case time.Since(lastLog) > time.Minute:
			a.opt.Logger.Error("buffer: packets not stored", "packets", len(batch)-n, "err", err)
			lastLog = time.Now()
		}
		a.stored.Add(uint64(n))
		a.failed.Add(uint64(len(batch) - n))
		clear(batch) // let the packets go
	}
}
