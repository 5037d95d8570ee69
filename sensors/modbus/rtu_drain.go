package modbus

import (
	"context"
	"fmt"
	"time"
)

// discard throws away stale input (a late reply to a request that timed
// out, a garbage tail, a babbling neighbour) and returns once the line has
// been quiet for the silent interval t3.5, so that the request is not sent
// into someone else's frame and the reply read is not someone else's bytes.
// A serial port's kernel buffer is flushed first; bytes still in flight are
// read out. A line that is still talking at the deadline is an
// [ErrLineBusy]: the request is not sent.
func (t *rtuTransport) discard(ctx context.Context, r *request, deadline time.Time) error {
	if f, ok := t.link.(interface{ ResetInputBuffer() error }); ok {
		if err := f.ResetInputBuffer(); err != nil {
			return err
		}
	}
	n, busy, err := t.drain(ctx, deadline, false)
	if err != nil {
		return err
	}
	if busy {
		return notSent(fmt.Errorf("%w: %s: not sent: %d bytes of input kept arriving until the deadline (another device is transmitting)", ErrLineBusy, r, n))
	}
	return nil
}

// drain reads and throws away input until the line has been quiet for
// the silent interval, or until deadline. busy reports that bytes were
// still arriving when the deadline came, and n how many were thrown away.
// Even an idle line is listened to for drainWait, to catch bytes in flight.
// Once a byte has been seen, or when wary is set (after a bad reply), the
// line must stay quiet for babbleQuiet instead of t3.5.
func (t *rtuTransport) drain(ctx context.Context, deadline time.Time, wary bool) (n int, busy bool, err error) {
	defer func() {
		if n > 0 {
			t.stats.received.Add(uint64(n))
			t.stats.discarded.Add(uint64(n))
			t.log.Debug("modbus: discarded stale input", "link", t.what, "bytes", n)
		}
	}()
	for {
		quiet := t.silence
		if wary || n > 0 {
			quiet = max(quiet, babbleQuiet)
		}
		until := time.Now().Add(drainWait)
		if q := t.quietSince.Add(quiet); q.After(until) {
			until = q
		}
		clamped := false
		if until.After(deadline) {
			until, clamped = deadline, true
		}
		if err := setReadDeadline(ctx, t.link, until); err != nil {
			return n, false, err
		}
		k, err := t.link.Read(t.buf[:])
		if k > 0 {
			n += k
			t.quietSince = time.Now()
		}
		if err != nil {
			if !isTimeout(err) {
				return n, false, err
			}
			if err := ctx.Err(); err != nil {
				return n, false, err
			}
			// Quiet for the whole wait, unless the wait was cut short by
			// the deadline before the line had been quiet long enough.
			if k == 0 && (!clamped || !time.Now().Before(t.quietSince.Add(quiet))) {
				return n, false, nil
			}
		}
		if !time.Now().Before(deadline) {
			return n, n > 0, nil
		}
	}
}

func (t *rtuTransport) waitSilence(ctx context.Context) error {
	d := time.Until(t.quietSince.Add(t.silence))
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
