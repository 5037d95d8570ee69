package modbus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	gm "github.com/goburrow/modbus"
)

const (
	// mbapLen is the Modbus TCP header: transaction id, protocol id (0),
	// length of what follows, unit id.
	mbapLen = 7
	// tcpMaxPDU bounds the MBAP length field (unit id + PDU of 253).
	tcpMaxPDU = 254
)

// dialTCP returns a dialer for address with TCP keep-alive on, so that a
// peer that vanished without a FIN (a device server losing power in the
// field) is noticed even while no request is outstanding.
func dialTCP(address string) func(ctx context.Context, deadline time.Time) (net.Conn, error) {
	return func(ctx context.Context, deadline time.Time) (net.Conn, error) {
		d := net.Dialer{
			Deadline: deadline,
			KeepAliveConfig: net.KeepAliveConfig{
				Enable:   true,
				Idle:     15 * time.Second,
				Interval: 5 * time.Second,
				Count:    3,
			},
		}
		return d.DialContext(ctx, "tcp", address)
	}
}

// tcpTransport runs Modbus TCP exchanges on one connection, dialed on the
// first request and redialed after any failure other than an exception.
type tcpTransport struct {
	address string
	dial    func(ctx context.Context, deadline time.Time) (net.Conn, error)
	conn    net.Conn
	tid     uint16 // transaction id of the last request
	stats   *counters
	log     *slog.Logger
	buf     [mbapLen + tcpMaxPDU]byte
}

func newTCPTransport(address string, dial func(context.Context, time.Time) (net.Conn, error), stats *counters, log *slog.Logger) *tcpTransport {
	return &tcpTransport{address: address, dial: dial, stats: stats, log: log}
}

func (t *tcpTransport) close() error {
	if t.conn == nil {
		return nil
	}
	err := t.conn.Close()
	t.conn = nil
	return err
}

func (t *tcpTransport) exchange(ctx context.Context, deadline time.Time, r *request) ([]byte, error) {
	if t.conn != nil && pendingInput(t.conn) {
		// Bytes before a request answer nothing: a device sent more than
		// its reply said, or sends unasked. Past them the stream cannot be
		// trusted to be in step; start afresh rather than parse them as the
		// next reply.
		t.log.Warn("modbus: unsolicited input on the connection; reconnecting", "address", t.address)
		_ = t.conn.Close()
		t.conn = nil
	}
	if t.conn == nil {
		conn, err := t.dial(ctx, deadline)
		if err != nil {
			return nil, notSent(fmt.Errorf("modbus: %s: %w", r, err))
		}
		t.log.Info("modbus: connected", "address", t.address)
		t.conn = conn
	}
	data, err := t.roundTrip(ctx, deadline, r)
	if err != nil && !isException(err) {
		// Whatever went wrong, the stream may now be out of step: a fresh
		// connection is cheaper than guessing.
		t.log.Debug("modbus: closing connection after error", "address", t.address, "err", err)
		_ = t.conn.Close()
		t.conn = nil
	}
	return data, err
}

func (t *tcpTransport) roundTrip(ctx context.Context, deadline time.Time, r *request) ([]byte, error) {
	conn := t.conn
	defer abandonOnCancel(ctx, conn)()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, notSent(fmt.Errorf("modbus: %s: set deadline: %w", r, err))
	}
	if err := ctx.Err(); err != nil {
		return nil, notSent(fmt.Errorf("modbus: %s: not sent: %w", r, err))
	}

	t.tid++
	body := r.pdu()
	req := t.buf[:mbapLen+1+len(body)]
	binary.BigEndian.PutUint16(req[0:], t.tid)
	binary.BigEndian.PutUint16(req[2:], 0)
	binary.BigEndian.PutUint16(req[4:], uint16(2+len(body))) // unit id, function, body
	req[6] = r.slave
	req[7] = r.fc
	copy(req[8:], body)
	sent := time.Now()
	n, err := conn.Write(req)
	t.stats.sent.Add(uint64(n))
	if err != nil {
		switch ctxErr := ctx.Err(); {
		case n > 0 && ctxErr != nil:
			// The kernel may deliver what it took.
			return nil, fmt.Errorf("modbus: %s: abandoned after %d of %d bytes written: %w (%w)", r, n, len(req), ctxErr, err)
		case n > 0:
			return nil, fmt.Errorf("modbus: %s: write request: %d of %d bytes written: %w", r, n, len(req), err)
		case ctxErr != nil:
			return nil, notSent(fmt.Errorf("modbus: %s: not sent: %w", r, ctxErr))
		}
		return nil, notSent(fmt.Errorf("modbus: %s: write request: %w", r, err))
	}
	t.stats.sentRequest(r)

	stale := 0
	for {
		got := 0
		readFull := func(p []byte) error {
			k, err := io.ReadFull(conn, p)
			got += k
			t.stats.received.Add(uint64(k))
			if err == nil {
				return nil
			}
			if isTimeout(err) {
				ctxErr := ctxErrNow(ctx)
				if errors.Is(ctxErr, context.Canceled) {
					return fmt.Errorf("modbus: %s: abandoned: %w", r, ctxErr)
				}
				var e error
				if got == 0 {
					e = fmt.Errorf("%w: %s (transaction %d): nothing within %v",
						ErrTimeout, r, t.tid, time.Since(sent).Round(time.Millisecond))
				} else {
					e = fmt.Errorf("%w: %s (transaction %d): got %d bytes of a reply within %v",
						ErrShortFrame, r, t.tid, got, time.Since(sent).Round(time.Millisecond))
				}
				if stale > 0 {
					e = fmt.Errorf("%w, after discarding %d replies with a stale transaction id", e, stale)
				}
				if ctxErr != nil {
					e = fmt.Errorf("%w (%w)", e, ctxErr)
				}
				return e
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("modbus: %s (transaction %d): peer closed the connection after %d bytes of reply: %w", r, t.tid, got, err)
			}
			return fmt.Errorf("modbus: %s (transaction %d): read reply: %w", r, t.tid, err)
		}

		hdr := t.buf[:mbapLen]
		if err := readFull(hdr); err != nil {
			return nil, err
		}
		tid := binary.BigEndian.Uint16(hdr[0:])
		proto := binary.BigEndian.Uint16(hdr[2:])
		length := int(binary.BigEndian.Uint16(hdr[4:]))
		unit := hdr[6]
		if proto != 0 || length < 3 || length > tcpMaxPDU {
			return nil, fmt.Errorf("%w: %s (transaction %d): bad MBAP header % x (protocol id %d, length %d)",
				ErrUnexpectedReply, r, t.tid, hdr, proto, length)
		}
		pdu := t.buf[mbapLen : mbapLen+length-1]
		if err := readFull(pdu); err != nil {
			return nil, err
		}
		if tid != t.tid {
			// A late reply to an earlier request that timed out.
			stale++
			t.stats.discarded.Add(uint64(mbapLen + len(pdu)))
			t.log.Debug("modbus: discarded reply with stale transaction id", "address", t.address, "tid", tid, "want", t.tid)
			continue
		}
		if unit != r.slave {
			return nil, fmt.Errorf("%w: %s (transaction %d): reply from unit %d", ErrUnexpectedReply, r, t.tid, unit)
		}
		fc := pdu[0]
		if fc == r.fc|0x80 && len(pdu) == 2 {
			return nil, r.exception(fc, pdu[1])
		}
		if fc != r.fc {
			return nil, fmt.Errorf("%w: %s (transaction %d): function code %d, PDU % x", ErrUnexpectedReply, r, t.tid, fc, pdu)
		}
		if r.fc == fcMEI {
			if deviceIDLen(pdu[1:]) != len(pdu)-1 {
				return nil, fmt.Errorf("%w: %s (transaction %d): device identification of %d bytes, PDU % x", ErrUnexpectedReply, r, t.tid, len(pdu)-1, pdu)
			}
		} else if r.isWrite() {
			if !bytes.Equal(pdu[1:], r.echo()) {
				return nil, fmt.Errorf("%w: %s (transaction %d): echo % x, want % x", ErrUnexpectedReply, r, t.tid, pdu[1:], r.echo())
			}
		} else if int(pdu[1]) != r.want || len(pdu) != 2+r.want {
			return nil, fmt.Errorf("%w: %s (transaction %d): byte count %d in a PDU of %d bytes, want %d data bytes",
				ErrUnexpectedReply, r, t.tid, pdu[1], len(pdu), r.want)
		}
		if pendingInput(conn) {
			// More bytes than the header announced: the length field, and
			// with it the data, cannot be trusted.
			return nil, fmt.Errorf("%w: %s (transaction %d): more bytes follow a reply whose header announced %d",
				ErrUnexpectedReply, r, t.tid, mbapLen+len(pdu))
		}
		switch {
		case r.fc == fcMEI:
			return append([]byte(nil), pdu[1:]...), nil
		case r.isWrite():
			return nil, nil
		}
		return append([]byte(nil), pdu[2:]...), nil
	}
}

func isException(err error) bool {
	var mbErr *gm.ModbusError
	return errors.As(err, &mbErr)
}
