package modbus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	gm "github.com/goburrow/modbus"
)

// frameReader accumulates one reply in t.buf and turns read failures into
// the package's errors.
type frameReader struct {
	t    *rtuTransport
	ctx  context.Context
	r    *request
	sent time.Time
	n    int // bytes of the reply in t.buf
}

// fill reads until the reply holds total bytes.
func (f *frameReader) fill(total int) error {
	k, err := io.ReadFull(f.t.link, f.t.buf[f.n:total])
	if k > 0 {
		f.n += k
		f.t.quietSince = time.Now()
		f.t.stats.received.Add(uint64(k))
	}
	if err == nil {
		return nil
	}
	if isTimeout(err) {
		ctxErr := ctxErrNow(f.ctx)
		if errors.Is(ctxErr, context.Canceled) {
			return fmt.Errorf("modbus: %s: abandoned after %d bytes of reply: %w", f.r, f.n, ctxErr)
		}
		var e error
		if f.cutLate() {
			late := f.late(f.t.buf[0])
			late.Cut = true
			e = late
		} else if f.n == 0 {
			e = fmt.Errorf("%w: %s: nothing within %v", ErrTimeout, f.r, time.Since(f.sent).Round(time.Millisecond))
		} else {
			e = fmt.Errorf("%w: %s: got %d of %d bytes within %v: % x", ErrShortFrame, f.r, f.n, total, time.Since(f.sent).Round(time.Millisecond), f.t.buf[:f.n])
		}
		if ctxErr != nil {
			e = fmt.Errorf("%w (%w)", e, ctxErr)
		}
		return e
	}
	return fmt.Errorf("modbus: %s: read reply after %d bytes: %w", f.r, f.n, err)
}

func (f *frameReader) checkCRC(h *gm.RTUClientHandler) error {
	if _, err := h.Decode(f.t.buf[:f.n]); err != nil {
		return fmt.Errorf("%w: %s: frame % x: %v", ErrCRC, f.r, f.t.buf[:f.n], err)
	}
	return nil
}

func (f *frameReader) unexpected(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s (frame starts % x)", ErrUnexpectedReply, f.r, fmt.Sprintf(format, args...), f.t.buf[:f.n])
}

// late is the error for a well-formed reply from slave, not the one asked.
func (f *frameReader) late(slave byte) *LateReplyError {
	e := &LateReplyError{Slave: slave, Request: f.r.String(), Frame: append([]byte(nil), f.t.buf[:f.n]...)}
	if u := f.t.unanswered; !u.sent.IsZero() && u.slave == slave {
		e.After = time.Since(u.sent)
	}
	return e
}

// cutLate reports whether the bytes read, cut short by the deadline, begin
// a reply to the last unanswered request (its slave and function code),
// not to r: that slave's late reply, straddling r's deadline.
func (f *frameReader) cutLate() bool {
	u := f.t.unanswered
	if f.n < 2 || u.sent.IsZero() || u.slave == f.r.slave {
		return false
	}
	slave, fc := f.t.buf[0], f.t.buf[1]
	return slave == u.slave && (fc == u.fc || fc == u.fc|0x80)
}
