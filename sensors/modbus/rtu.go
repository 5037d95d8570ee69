package modbus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	gm "github.com/goburrow/modbus"
)

const (
	// rtuBitsPerChar is the character length the RTU specification
	// requires: start, 8 data, parity (or a second stop bit), stop.
	rtuBitsPerChar = 11
	// rtuMaxADU is the largest RTU frame: address, PDU of 253, CRC.
	rtuMaxADU = 256
	// rtuExceptionLen is address, function|0x80, exception code, CRC.
	rtuExceptionLen = 5
	// drainWait is how long the discard step waits for more stale bytes on
	// a link that cannot flush its input buffer (a socket, a pipe). Bytes
	// already buffered are returned at once; this only bounds the wait for
	// bytes still in flight.
	drainWait = time.Millisecond
	// rtuWriteReplyLen is the reply to a write: address, function, the
	// 4-byte echo, CRC.
	rtuWriteReplyLen = 8
	// babbleQuiet is how long a line that carried unexpected bytes must
	// stay silent before it counts as quiet again. t3.5 alone would take a
	// babbling line for a quiet one: USB serial adapters hand bytes over
	// in bursts up to their latency timer apart (16 ms by default), and so
	// do pty relays.
	babbleQuiet = 20 * time.Millisecond
)

// Link is the byte stream an RTU [Client] talks over: a serial port, a TCP
// socket to a serial device server, or net.Pipe in tests. A *net.TCPConn
// satisfies it.
//
// SetReadDeadline must make a blocked Read return an error satisfying
// errors.Is(err, os.ErrDeadlineExceeded) when the deadline passes, and must
// be safe to call while a Read is blocked (the Client calls it from another
// goroutine to abandon a request whose ctx is canceled).
//
// Optional extras the Client uses when present: ResetInputBuffer() error
// (serial ports: flush stale input instead of reading it out) and
// SetWriteDeadline(time.Time) error (so a stuck write cannot outlive the
// request).
type Link interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	Close() error
	SetReadDeadline(t time.Time) error
}

// CharTime is the time one character of bitsPerChar bits takes on the wire
// at baud: 1.146 ms for 11 bits at 9600 baud.
func CharTime(baud, bitsPerChar int) time.Duration {
	if baud <= 0 {
		return 0
	}
	return time.Duration(bitsPerChar) * time.Second / time.Duration(baud)
}

// Silence is t3.5, the silent interval that must separate two RTU frames:
// 3.5 characters of 11 bits up to 19200 baud (4.01 ms at 9600), and a fixed
// 1.75 ms above, as the Modbus serial line specification (v1.02 §2.5.1.1)
// says.
func Silence(baud int) time.Duration {
	if baud <= 0 || baud > 19200 {
		return 1750 * time.Microsecond
	}
	return 7 * CharTime(baud, rtuBitsPerChar) / 2
}

// BroadcastTurnaround is how long a broadcast write holds a serial bus
// after its frame: slaves execute a broadcast without replying, and a
// request sent meanwhile may meet a slave still busy with it. The Modbus
// serial line specification (v1.02 §2.4.1) calls it the turnaround delay
// and puts it at 100 to 200 ms; this is its low end.
const BroadcastTurnaround = 100 * time.Millisecond

// rtuTransport runs RTU exchanges over a Link, keeping the inter-frame
// silence and reading each reply by its expected length.
type rtuTransport struct {
	link Link
	// open (re)opens the link after an I/O error dropped it. nil means the
	// link is fixed (NewRTU): it is kept after errors and never reopened.
	open     func(ctx context.Context, deadline time.Time) (Link, error)
	what     string // the device or address, for logs
	charTime time.Duration
	silence  time.Duration
	// quietSince is when the line last carried a byte we sent (estimated
	// end of transmission) or received. The next frame waits until
	// quietSince + silence.
	quietSince time.Time
	// unanswered is the last request whose reply did not come (or was not
	// read), so that a reply from its slave arriving later is known late.
	unanswered struct {
		slave, fc byte
		sent      time.Time
	}
	stats *counters
	log   *slog.Logger
	buf   [rtuMaxADU]byte
}

func newRTUTransport(link Link, open func(context.Context, time.Time) (Link, error), what string, baud, bitsPerChar int, stats *counters, log *slog.Logger) *rtuTransport {
	return &rtuTransport{
		link:     link,
		open:     open,
		what:     what,
		charTime: CharTime(baud, bitsPerChar),
		silence:  Silence(baud),
		stats:    stats,
		log:      log,
	}
}

func (t *rtuTransport) close() error {
	if t.link == nil {
		return nil
	}
	err := t.link.Close()
	t.link = nil
	t.open = nil // a closed client never reopens
	return err
}

func (t *rtuTransport) exchange(ctx context.Context, deadline time.Time, r *request) ([]byte, error) {
	if t.link == nil {
		if t.open == nil {
			return nil, notSent(fmt.Errorf("%w: %s", ErrClosed, r))
		}
		link, err := t.open(ctx, deadline)
		if err != nil {
			return nil, notSent(fmt.Errorf("modbus: %s: %w", r, err))
		}
		t.log.Info("modbus: link opened", "link", t.what)
		t.link = link
		t.quietSince = time.Time{}
	}
	data, err := t.roundTrip(ctx, deadline, r)
	if err != nil && t.open != nil && isLinkFailure(err) {
		t.log.Warn("modbus: closing link after I/O error; the next request reopens it", "link", t.what, "err", err)
		_ = t.link.Close()
		t.link = nil
	}
	return data, err
}

func (t *rtuTransport) roundTrip(ctx context.Context, deadline time.Time, r *request) ([]byte, error) {
	link := t.link
	defer abandonOnCancel(ctx, link)()

	// 1. Whatever is waiting is stale (a late reply to a request that timed
	// out, a garbage tail, line noise) and would be read as this reply.
	if err := t.discard(ctx, r, deadline); err != nil {
		if errors.Is(err, ErrLineBusy) {
			return nil, err
		}
		return nil, t.notSent(ctx, r, "discard stale input", err)
	}
	// 2. Keep t3.5 between the last byte on the line and our first.
	if err := t.waitSilence(ctx); err != nil {
		return nil, t.notSent(ctx, r, "wait for the silent interval", err)
	}
	// 3. Send.
	h := gm.NewRTUClientHandler("")
	h.SlaveId = r.slave
	adu, err := h.Encode(&gm.ProtocolDataUnit{FunctionCode: r.fc, Data: r.pdu()})
	if err != nil {
		return nil, notSent(fmt.Errorf("modbus: %s: encode: %w", r, err))
	}
	if wd, ok := link.(interface{ SetWriteDeadline(time.Time) error }); ok {
		if err := wd.SetWriteDeadline(deadline); err != nil {
			return nil, notSent(fmt.Errorf("modbus: %s: set write deadline: %w", r, err))
		}
	}
	if err := setReadDeadline(ctx, link, deadline); err != nil {
		return nil, t.notSent(ctx, r, "set read deadline", err)
	}
	sent := time.Now()
	n, err := link.Write(adu)
	t.stats.sent.Add(uint64(n))
	// Write returns when the bytes are in the kernel, not on the wire.
	t.quietSince = sent.Add(time.Duration(len(adu)) * t.charTime)
	if now := time.Now(); now.After(t.quietSince) {
		t.quietSince = now
	}
	if err != nil {
		if n == 0 {
			return nil, t.notSent(ctx, r, "write request", err)
		}
		// Part of the frame may be on the line. A slave drops a frame cut
		// short by its CRC, but what the link reports written is not
		// necessarily what left.
		return nil, fmt.Errorf("modbus: %s: write request: %d of %d bytes written: %w", r, n, len(adu), err)
	}
	t.stats.sentRequest(r)
	if r.broadcast {
		t.turnaround(ctx, deadline)
		return nil, nil
	}

	// 4. Receive: address, function, and a third byte that is the byte
	// count of a normal reply or the code of an exception.
	f := frameReader{t: t, ctx: ctx, r: r, sent: sent}
	data, err := t.receive(&f, h)
	switch {
	case err == nil, isException(err):
		t.unanswered.sent = time.Time{}
	case errors.Is(err, ErrTimeout), errors.Is(err, ErrLateReply):
		// Its reply may still come, during a later request.
		t.unanswered.slave, t.unanswered.fc, t.unanswered.sent = r.slave, r.fc, sent
	}
	if err != nil && (errors.Is(err, ErrUnexpectedReply) || errors.Is(err, ErrCRC)) {
		err = t.resync(ctx, deadline, err)
	}
	return data, err
}

// resync follows a bad reply: the rest of it, or whatever a confused slave
// keeps sending, is read out until the line is quiet, within this request's
// deadline, so that it is charged to this request and not to the next.
func (t *rtuTransport) resync(ctx context.Context, deadline time.Time, replyErr error) error {
	n, busy, err := t.drain(ctx, deadline, true)
	switch {
	case err != nil && ctx.Err() == nil && !isTimeout(err):
		return fmt.Errorf("%w; then reading out the rest failed: %w", replyErr, err)
	case busy:
		return fmt.Errorf("%w; the line was still busy at the deadline (%d more bytes discarded)", replyErr, n)
	}
	return replyErr
}

// turnaround waits out BroadcastTurnaround after a broadcast, or until
// deadline or the end of ctx if sooner: the frame has gone out, so either
// way the broadcast is done.
func (t *rtuTransport) turnaround(ctx context.Context, deadline time.Time) {
	until := t.quietSince.Add(BroadcastTurnaround)
	if until.After(deadline) {
		until = deadline
	}
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// receive reads and judges the reply to r.
func (t *rtuTransport) receive(f *frameReader, h *gm.RTUClientHandler) ([]byte, error) {
	r := f.r
	if err := f.fill(3); err != nil {
		return nil, err
	}
	slave, fc := t.buf[0], t.buf[1]
	if fc == r.fc|0x80 {
		if err := f.fill(rtuExceptionLen); err != nil {
			return nil, err
		}
		if err := f.checkCRC(h); err != nil {
			return nil, err
		}
		if slave != r.slave {
			return nil, f.late(slave)
		}
		return nil, r.exception(fc, t.buf[2])
	}
	if fc != r.fc {
		return nil, f.unexpected("function code %d", fc)
	}
	if r.fc == fcMEI {
		// Its length is told object by object.
		for {
			need := 2 + deviceIDLen(t.buf[2:f.n])
			if need <= f.n {
				break
			}
			if need+2 > len(t.buf) {
				return nil, f.unexpected("device identification longer than a frame")
			}
			if err := f.fill(need); err != nil {
				return nil, err
			}
		}
		if err := f.fill(f.n + 2); err != nil {
			return nil, err
		}
		if err := f.checkCRC(h); err != nil {
			return nil, err
		}
		if slave != r.slave {
			return nil, f.late(slave)
		}
		return append([]byte(nil), t.buf[2:f.n-2]...), nil
	}
	if r.isWrite() {
		if err := f.fill(rtuWriteReplyLen); err != nil {
			return nil, err
		}
		if err := f.checkCRC(h); err != nil {
			return nil, err
		}
		if slave != r.slave {
			return nil, f.late(slave)
		}
		if echo := t.buf[2:6]; !bytes.Equal(echo, r.echo()) {
			return nil, f.unexpected("echo % x, want % x", echo, r.echo())
		}
		return nil, nil
	}
	if int(t.buf[2]) != r.want {
		return nil, f.unexpected("byte count %d, want %d", t.buf[2], r.want)
	}
	if err := f.fill(3 + r.want + 2); err != nil {
		return nil, err
	}
	if err := f.checkCRC(h); err != nil {
		return nil, err
	}
	if slave != r.slave {
		// A well-formed reply from another slave: late, after its
		// request's deadline, or one device answering for another.
		return nil, f.late(slave)
	}
	return append([]byte(nil), t.buf[3:3+r.want]...), nil
}

// notSent explains a failure before the request reached the wire,
// preferring ctx's error when ctx ended.
func (t *rtuTransport) notSent(ctx context.Context, r *request, step string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return notSent(fmt.Errorf("modbus: %s: not sent: %w", r, ctxErr))
	}
	return notSent(fmt.Errorf("modbus: %s: %s: %w", r, step, err))
}
