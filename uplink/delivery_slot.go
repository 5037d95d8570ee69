package uplink

import (
	"context"
	"fieldlink/uplink/internal/errnote"
	"sync/atomic"
	"time"
)

type slot struct {
	sender                    Sender
	free                      chan struct{} // one token per free window place
	picked, delivered, failed atomic.Uint64
	// An upstream that is up (it answers probes) but fails deliveries (a
	// 401, a TLS handshake it refuses, a broker that drops every publish)
	// is not picked until coolUntil (Unix ns): 100 ms after its first
	// failure in a row, doubling up to DeliveryOptions.Backoff. Without it
	// the loop would lease, send and release as fast as the upstream can
	// refuse.
	failRun   atomic.Int64
	coolUntil atomic.Int64
	lastErr   errnote.Last // the latest failed delivery
	// downSince is when the sender was first seen down (Unix ns), 0 while
	// up; failSince the first failed delivery since the last success.
	downSince, failSince atomic.Int64
}

// seenUp records whether s's sender is up, as the table is told.
func (s *slot) seenUp(up bool) {
	if up {
		s.downSince.Store(0)
	} else {
		s.downSince.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// cooling reports whether s is resting after failures at now (Unix ns).
func (s *slot) cooling(now int64) bool { return now < s.coolUntil.Load() }

// rest records a failed delivery on s and rests it.
func (s *slot) rest(maxWait time.Duration) {
	n := s.failRun.Add(1)
	wait := min(100*time.Millisecond<<min(n-1, 16), maxWait)
	s.coolFor(jitter(wait))
}

// coolFor has s picked no sooner than wait from now; a rest already longer
// stands.
func (s *slot) coolFor(wait time.Duration) {
	t := time.Now().Add(wait).UnixNano()
	for {
		cur := s.coolUntil.Load()
		if cur >= t || s.coolUntil.CompareAndSwap(cur, t) {
			return
		}
	}
}

func (d *Delivery) slot(i int) *slot {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i < len(d.slots) {
		return d.slots[i]
	}
	return nil
}

// acquire picks an upstream with a free window place, skipping skip.
func (d *Delivery) acquire(skip uint64) (int, *slot, bool) {
	for {
		i, ok := d.strat.Pick(d.table, skip)
		if !ok {
			return 0, nil, false
		}
		s := d.slot(i)
		if s == nil || s.cooling(time.Now().UnixNano()) {
			skip |= 1 << i
			continue
		}
		select {
		case <-s.free:
			return i, s, true
		default:
			skip |= 1 << i // window full: try another
		}
	}
}

func (d *Delivery) release(s *slot) {
	s.free <- struct{}{}
	select {
	case d.freed <- struct{}{}:
	default:
	}
}

// acquireSlot waits for a window place on s and reports whether it took
// one; once ctx has ended it takes none, so that no send starts during
// shutdown (and none gives back a place it did not take).
func (d *Delivery) acquireSlot(ctx context.Context, s *slot) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case <-s.free:
		return true
	case <-ctx.Done():
		return false
	}
}
