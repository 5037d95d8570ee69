package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"fieldlink/buffer"
	"fieldlink/packet"
)

// sink takes packets from the pollers into the buffer without making a bus
// wait for an fsync: the packets that arrive while one commit runs go into
// the next together, so a whole poll cycle shares a commit and the SD card
// sees one write instead of one per device.
type appender struct {
	q       *buffer.Buffer
	ch      chan *packet.Packet
	log     *slog.Logger
	fatal   atomic.Pointer[error]
	onFatal func()
	// stored, if set, sees each packet once it is in the buffer (with its
	// Seq), from Run's goroutine.
	onStored func(*packet.Packet)
	done     chan struct{}
	stored   atomic.Uint64
	failed   atomic.Uint64
}

func newAppender(q *buffer.Buffer, log *slog.Logger, onFatal func()) *appender {
	return &appender{q: q, ch: make(chan *packet.Packet, 4096), log: log, onFatal: onFatal, done: make(chan struct{})}
}

// Put queues a packet; it blocks only when 4096 are already waiting.
func (s *appender) Put(p *packet.Packet) { s.ch <- p }

// Close ends Run once the queued packets are stored.
func (s *appender) Close() { close(s.ch); <-s.done }

// Fatal returns the buffer's fatal error, if one happened.
func (s *appender) Fatal() error {
	if e := s.fatal.Load(); e != nil {
		return *e
	}
	return nil
}

// Run appends until Close. It does not stop with a context: packets polled
// before shutdown are stored before the buffer closes.
func (s *appender) Run() {
	defer close(s.done)
	var batch []*packet.Packet
	var lastLog time.Time
	for p := range s.ch {
		batch = append(batch[:0], p)
	drain:
		for len(batch) < 1024 {
			select {
			case p, ok := <-s.ch:
				if !ok {
					break drain
				}
				batch = append(batch, p)
			default:
				break drain
			}
		}
		if s.Fatal() != nil {
			s.failed.Add(uint64(len(batch)))
			continue
		}
		err := s.q.AppendAll(context.Background(), batch...)
		n := 0
		for _, p := range batch {
			if p.Seq != 0 {
				n++
				if s.onStored != nil {
					s.onStored(p)
				}
			}
		}
		s.stored.Add(uint64(n))
		s.failed.Add(uint64(len(batch) - n))
		switch {
		case err == nil:
		case errors.Is(err, buffer.ErrFatal):
			s.fatal.Store(&err)
			s.onFatal()
		case time.Since(lastLog) > time.Minute:
			s.log.Error("packets not buffered", "packets", len(batch)-n, "err", err)
			lastLog = time.Now()
		}
	}
}
