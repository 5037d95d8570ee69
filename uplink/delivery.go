package uplink

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/buffer"
	"fieldlink/selector"
)

// DeliveryOptions tune the loop; zero values are the defaults.
type DeliveryOptions struct {
	// Attempts is how many upstreams one batch is tried on before it goes
	// back to the buffer; default: every upstream once.
	Attempts int
	// Backoff bounds the wait when no upstream can take a batch: from
	// 100ms, doubling, with jitter, up to this; default 5s.
	Backoff time.Duration
	Logger  *slog.Logger
	// DeadLetters receives permanently refused records; nil acks them
	// after logging (they are counted either way).
	DeadLetters DeadLetters
}

// Delivery moves packets from the buffer to the upstreams: Lease, Pick,
// Send, then Ack on success; on failure the batch is tried on another
// upstream, and when none can take it, it goes back to the buffer and the
// loop backs off. Many batches are in flight at once (each upstream's
// window), so a backlog drains over every upstream that takes records,
// in parallel.
type Delivery struct {
	q     Buffer
	table *selector.Table
	strat selector.Strategy
	opt   DeliveryOptions
	log   *slog.Logger

	mu    sync.Mutex // guards slots
	slots []*slot    // by table index

	freed chan struct{} // a window place came free (non-blocking signal)
	wg    sync.WaitGroup
	acks  chan []uint64 // delivered seqs, acked in groups by ackLoop

	delivered, retried, dead, released atomic.Uint64
	inflight                           atomic.Int64
	lastDelivered                      atomic.Int64 // Unix ns
}

// NewDelivery returns a loop over q; add upstreams with Add before Run.
func NewDelivery(q Buffer, table *selector.Table, strat selector.Strategy, opt DeliveryOptions) *Delivery {
	if opt.Backoff <= 0 {
		opt.Backoff = 5 * time.Second
	}
	d := &Delivery{q: q, table: table, strat: strat, opt: opt, log: opt.Logger, freed: make(chan struct{}, 1), acks: make(chan []uint64, 1024)}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	return d
}

// Add registers an upstream under the table index idx (from Table.Add).
func (d *Delivery) Add(idx int, s Sender) {
	w := max(s.Window(), 1)
	sl := &slot{sender: s, free: make(chan struct{}, w)}
	for range w {
		sl.free <- struct{}{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.slots) <= idx {
		d.slots = append(d.slots, nil)
	}
	d.slots[idx] = sl
}

// refreshUp copies every sender's Up into the table, so that strategies
// never pick an upstream that cannot be tried.
func (d *Delivery) refreshUp() {
	d.mu.Lock()
	slots := append([]*slot(nil), d.slots...)
	d.mu.Unlock()
	for i, s := range slots {
		if s != nil {
			up := s.sender.Up()
			s.seenUp(up)
			d.table.SetUp(i, up)
		}
	}
}

// Run delivers until ctx ends, then waits for the batches in flight: each
// ends acked, or back in the buffer.
func (d *Delivery) Run(ctx context.Context) {
	ackDone := make(chan struct{})
	go func() { defer close(ackDone); d.ackLoop() }()
	defer func() {
		d.wg.Wait()
		close(d.acks)
		<-ackDone
	}()
	backoff := 100 * time.Millisecond
	var lastRefresh time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	wait := func(dur time.Duration) bool {
		timer.Reset(dur)
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-d.freed:
			return true
		}
	}
	for ctx.Err() == nil {
		if err := d.q.Wait(ctx); err != nil {
			return
		}
		if time.Since(lastRefresh) > 10*time.Millisecond {
			d.refreshUp()
			lastRefresh = time.Now()
		}
		i, s, ok := d.acquire(0)
		if !ok {
			// Every upstream is down or busy: packets stay in the buffer.
			d.refreshUp()
			if !wait(jitter(backoff)) {
				return
			}
			backoff = min(2*backoff, d.opt.Backoff)
			continue
		}
		// Take more of this upstream's free window places at once, so that
		// one buffer read feeds many sends.
		places := 1
		for places < maxPlaces {
			select {
			case <-s.free:
				places++
				continue
			default:
			}
			break
		}
		per := s.sender.MaxBatch()
		recs, err := d.q.Lease(places * per)
		if err != nil || len(recs) == 0 {
			for range places {
				d.release(s)
			}
			if err != nil {
				d.log.Error("buffer read failed", "err", err)
				if !wait(jitter(backoff)) {
					return
				}
			}
			continue
		}
		backoff = 100 * time.Millisecond
		for len(recs) > 0 {
			batch := recs[:min(per, len(recs))]
			recs = recs[len(batch):]
			places--
			d.inflight.Add(1)
			d.wg.Go(func() {
				defer d.inflight.Add(-1)
				d.deliver(ctx, i, s, batch)
			})
		}
		for ; places > 0; places-- {
			d.release(s)
		}
	}
}

// ackLoop acks delivered seqs in groups: whatever was delivered while the
// previous ack was handed over goes into the next, so a fast upstream costs
// the buffer one request per group, not one per packet; a queue that can
// (laterAcker) deletes them with its next commit rather than one of their
// own. An ack lost in a crash means the packet is sent again: delivery is
// at least once.
func (d *Delivery) ackLoop() {
	var group []uint64
	for seqs := range d.acks {
		group = append(group[:0], seqs...)
	more:
		for len(group) < 4096 {
			select {
			case s, ok := <-d.acks:
				if !ok {
					break more
				}
				group = append(group, s...)
			default:
				break more
			}
		}
		ack := d.q.Ack
		if l, ok := d.q.(laterAcker); ok {
			ack = l.AckLater
		}
		if err := ack(group...); err != nil {
			// The buffer keeps failed acks leased and retries them itself.
			d.log.Error("buffer ack failed", "packets", len(group), "err", err)
		}
	}
}

// maxPlaces bounds the sends one buffer read starts.
const maxPlaces = 64

func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// deliver sends recs on upstream i (whose window place is held), then on
// others if it fails, and settles them: acked, dead-lettered or released.
func (d *Delivery) deliver(ctx context.Context, i int, s *slot, recs []buffer.Record) {
	sendCtx := context.WithoutCancel(ctx)
	seqs := make([]uint64, len(recs))
	for k, r := range recs {
		seqs[k] = r.Seq
	}
	attempts := d.opt.Attempts
	if attempts <= 0 {
		attempts = d.table.Len()
	}
	var skip uint64
	for attempt := 1; ; attempt++ {
		// A send in progress when ctx ends may still be acknowledged: it
		// runs to its own end. Publishers bound every send themselves (MQTT
		// PublishTimeout, HTTP Timeout when the context has no deadline).
		s.picked.Add(1)
		tk := d.table.Begin(i)
		err := s.sender.Send(sendCtx, recs)
		d.table.End(tk, err)
		d.release(s)
		if err == nil {
			s.failRun.Store(0)
			s.failSince.Store(0)
			s.delivered.Add(uint64(len(recs)))
			d.delivered.Add(uint64(len(recs)))
			d.lastDelivered.Store(time.Now().UnixNano())
			d.acks <- seqs
			return
		}
		s.failed.Add(1)
		s.failSince.CompareAndSwap(0, time.Now().UnixNano())
		s.lastErr.Note(Explain(err))
		var p permanent
		if errors.As(err, &p) && p.Permanent() {
			if len(recs) > 1 {
				// Find the packet the upstream refuses: send each alone,
				// on the same upstream, and settle each by its own answer.
				for k, r := range recs {
					if s.cooling(time.Now().UnixNano()) || !d.acquireSlot(ctx, s) {
						// Stopping, or the upstream asked for a rest: what
						// is not sent yet stays in the buffer.
						d.released.Add(uint64(len(recs) - k))
						d.q.Release(seqs[k:]...)
						return
					}
					d.inflight.Add(1)
					d.deliver(ctx, i, s, []buffer.Record{r})
					d.inflight.Add(-1)
				}
				return
			}
			d.deadLetter(s, seqs, err)
			return
		}
		s.rest(d.opt.Backoff)
		var ra retryAfter
		if errors.As(err, &ra) && ra.RetryAfter() > 0 {
			s.coolFor(min(ra.RetryAfter(), maxRetryAfter))
		}
		d.log.Warn("delivery failed", "upstream", s.sender.Name(), "packets", len(recs), "attempt", attempt, "err", err)
		skip |= 1 << i
		if attempt >= attempts || ctx.Err() != nil {
			break
		}
		d.refreshUp()
		var ok bool
		i, s, ok = d.acquire(skip)
		if !ok {
			break
		}
		d.retried.Add(1)
	}
	d.released.Add(uint64(len(recs)))
	d.q.Release(seqs...)
}

func (d *Delivery) deadLetter(s *slot, seqs []uint64, err error) {
	d.dead.Add(uint64(len(seqs)))
	d.log.Error("upstream refused a packet for good: dead-lettered", "upstream", s.sender.Name(), "seq", seqs[0], "err", err)
	if d.opt.DeadLetters != nil {
		if derr := d.opt.DeadLetters.DeadLetter(err.Error(), seqs...); derr != nil {
			// The buffer keeps the move pending and retries it itself.
			d.log.Error("dead-letter not yet stored", "err", derr)
		}
		return
	}
	if aerr := d.q.Ack(seqs...); aerr != nil {
		d.log.Error("buffer ack failed", "err", aerr)
	}
}
