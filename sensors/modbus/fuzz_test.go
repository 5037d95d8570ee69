package modbus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"
)

// replayLink plays one scripted reply after each request is written, in
// chunks of a given size, and reports the deadline as passed once the
// script is exhausted, at once: a slave that never says more.
type replayLink struct {
	reply []byte
	chunk int
	input []byte
}

func (l *replayLink) Write(p []byte) (int, error) {
	l.input = append(l.input[:0], l.reply...)
	return len(p), nil
}

func (l *replayLink) Read(p []byte) (int, error) {
	if len(l.input) == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	n := copy(p[:min(len(p), l.chunk)], l.input)
	l.input = l.input[n:]
	return n, nil
}

func (l *replayLink) Close() error                    { return nil }
func (l *replayLink) SetReadDeadline(time.Time) error { return nil }

// FuzzRTUResponse feeds arbitrary bytes to the client as a slave's reply.
// It must never panic or hang, and it may only return data that a correct
// frame (checked with an independent CRC) carried.
func FuzzRTUResponse(f *testing.F) {
	f.Add(byte(3), uint16(2), uint8(1), withCRC(1, 3, 4, 0x12, 0x34, 0x56, 0x78))
	f.Add(byte(1), uint16(10), uint8(3), withCRC(1, 1, 2, 0xff, 0x03))
	f.Add(byte(4), uint16(1), uint8(255), withCRC(1, 0x84, 2))
	f.Add(byte(2), uint16(8), uint8(1), withCRC(2, 2, 1, 0xaa))
	f.Add(byte(3), uint16(2), uint8(2), []byte{1, 3, 4, 0x12})
	f.Add(byte(3), uint16(125), uint8(7), []byte("garbage, not a frame"))
	f.Add(byte(3), uint16(1), uint8(1), []byte{})

	f.Fuzz(func(t *testing.T, fc byte, qty uint16, chunk uint8, reply []byte) {
		fc = 1 + fc%4
		if fc <= 2 {
			qty = 1 + qty%2000
		} else {
			qty = 1 + qty%125
		}
		link := &replayLink{reply: reply, chunk: 1 + int(chunk)}
		c := NewRTU(link, 115200, Options{Timeout: time.Second})
		data, err := readOrHang(t, c, fc, qty, reply)

		var me *gm.ModbusError
		switch {
		case err == nil:
			want := 2 * int(qty)
			if fc <= 2 {
				want = (int(qty) + 7) / 8
			}
			frameLen := 3 + want + 2
			if len(reply) < frameLen || reply[0] != 1 || reply[1] != fc || int(reply[2]) != want ||
				crc16(reply[:frameLen-2]) != binary.LittleEndian.Uint16(reply[frameLen-2:]) {
				t.Fatalf("accepted an invalid reply % x to fc %d qty %d", reply, fc, qty)
			}
			if !bytes.Equal(data, reply[3:3+want]) {
				t.Fatalf("returned % x, frame carried % x", data, reply[3:3+want])
			}
		case errors.As(err, &me):
			if len(reply) < 5 || reply[0] != 1 || reply[1] != fc|0x80 || crc16(reply[:3]) != binary.LittleEndian.Uint16(reply[3:5]) {
				t.Fatalf("exception %v from an invalid frame % x", err, reply)
			}
			if me.ExceptionCode != reply[2] {
				t.Fatalf("exception code %d, frame says %d", me.ExceptionCode, reply[2])
			}
		case errors.Is(err, ErrTimeout):
			if len(reply) != 0 {
				t.Fatalf("ErrTimeout although %d bytes arrived: %v", len(reply), err)
			}
		case errors.Is(err, ErrShortFrame), errors.Is(err, ErrCRC), errors.Is(err, ErrUnexpectedReply):
		default:
			t.Fatalf("unexpected error kind: %v", err)
		}
	})
}

// replayConn is replayLink as a net.Conn, for the Modbus TCP transport: one
// scripted reply after each request, in chunks, then a passed deadline.
type replayConn struct {
	replayLink
}

func (c *replayConn) LocalAddr() net.Addr               { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) SetDeadline(time.Time) error       { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error  { return nil }
func (c *replayConn) SetReadDeadline(t time.Time) error { return nil }
func (c *replayConn) Read(p []byte) (int, error)        { return c.replayLink.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)       { return c.replayLink.Write(p) }
func (c *replayConn) Close() error                      { return nil }

var _ net.Conn = (*replayConn)(nil)

// mbapOutcome is what a correct Modbus TCP master must make of reply to its
// first request (transaction 1, unit 1, function fc, want data bytes),
// worked out with encoding/binary, independently of tcp.go: frames with
// another transaction id are skipped; the first with transaction 1 decides.
type mbapOutcome struct {
	data      []byte // a good reply's data
	exception int    // an exception's code, or -1
	timeout   bool   // nothing but stale frames: no reply at all
	bad       bool   // anything else: an error of some kind
}

func mbapOracle(reply []byte, fc byte, want int) mbapOutcome {
	bad := mbapOutcome{exception: -1, bad: true}
	for {
		if len(reply) == 0 {
			return mbapOutcome{exception: -1, timeout: true}
		}
		if len(reply) < 7 {
			return bad
		}
		tid := binary.BigEndian.Uint16(reply[0:])
		proto := binary.BigEndian.Uint16(reply[2:])
		length := int(binary.BigEndian.Uint16(reply[4:]))
		if proto != 0 || length < 3 || length > 254 || len(reply) < 6+length {
			return bad
		}
		unit, pdu := reply[6], reply[7:6+length]
		if tid != 1 {
			reply = reply[6+length:]
			continue
		}
		switch {
		case unit != 1:
			return bad
		case pdu[0] == fc|0x80 && len(pdu) == 2:
			return mbapOutcome{exception: int(pdu[1])}
		case pdu[0] == fc && int(pdu[1]) == want && len(pdu) == 2+want:
			return mbapOutcome{data: pdu[2:], exception: -1}
		}
		return bad
	}
}

// mbap builds a Modbus TCP frame around pdu.
func mbap(tid uint16, unit byte, pdu ...byte) []byte {
	b := make([]byte, 7, 7+len(pdu))
	binary.BigEndian.PutUint16(b, tid)
	binary.BigEndian.PutUint16(b[4:], uint16(1+len(pdu)))
	b[6] = unit
	return append(b, pdu...)
}

// FuzzTCPResponse feeds arbitrary bytes to the Modbus TCP client as the
// server's reply: MBAP header (transaction id, protocol id, length, unit id)
// and PDU. It must never panic or hang, and its verdict must match
// mbapOracle's.
func FuzzTCPResponse(f *testing.F) {
	f.Add(byte(3), uint16(2), uint8(7), mbap(1, 1, 3, 4, 0x12, 0x34, 0x56, 0x78))
	f.Add(byte(1), uint16(10), uint8(3), mbap(1, 1, 1, 2, 0xff, 0x03))
	f.Add(byte(4), uint16(1), uint8(255), mbap(1, 1, 0x84, 2))
	f.Add(byte(3), uint16(1), uint8(1), append(mbap(0, 1, 3, 2, 0xde, 0xad), mbap(1, 1, 3, 2, 0xbe, 0xef)...))
	f.Add(byte(3), uint16(1), uint8(2), mbap(1, 2, 3, 2, 0xbe, 0xef))
	f.Add(byte(3), uint16(1), uint8(2), mbap(1, 1, 4, 2, 0xbe, 0xef))
	f.Add(byte(3), uint16(1), uint8(9), []byte{0, 1, 0, 0, 0xff, 0xff, 1, 3})
	f.Add(byte(3), uint16(1), uint8(9), []byte{0, 1, 0, 7, 0, 5, 1, 3, 2, 0, 0})
	f.Add(byte(2), uint16(8), uint8(4), mbap(1, 1, 2, 1))
	f.Add(byte(3), uint16(125), uint8(7), []byte("garbage, not a frame"))
	f.Add(byte(3), uint16(1), uint8(1), []byte{})

	f.Fuzz(func(t *testing.T, fc byte, qty uint16, chunk uint8, reply []byte) {
		fc = 1 + fc%4
		want := 0
		if fc <= 2 {
			qty = 1 + qty%2000
			want = (int(qty) + 7) / 8
		} else {
			qty = 1 + qty%125
			want = 2 * int(qty)
		}
		conn := &replayConn{replayLink{reply: reply, chunk: 1 + int(chunk)}}
		c := newClient(Options{Timeout: time.Second}, false)
		c.tr = newTCPTransport("fuzz", func(context.Context, time.Time) (net.Conn, error) { return conn, nil }, &c.stats, c.log)
		data, err := readOrHang(t, c, fc, qty, reply)

		o := mbapOracle(reply, fc, want)
		var me *gm.ModbusError
		switch {
		case err == nil:
			if o.data == nil || !bytes.Equal(data, o.data) {
				t.Fatalf("returned % x for reply % x; the oracle says %+v", data, reply, o)
			}
		case errors.As(err, &me):
			if o.exception != int(me.ExceptionCode) {
				t.Fatalf("exception %v for reply % x; the oracle says %+v", err, reply, o)
			}
		case errors.Is(err, ErrTimeout):
			if !o.timeout {
				t.Fatalf("ErrTimeout for reply % x; the oracle says %+v: %v", reply, o, err)
			}
		case errors.Is(err, ErrShortFrame), errors.Is(err, ErrUnexpectedReply):
			if !o.bad {
				t.Fatalf("%v for reply % x; the oracle says %+v", err, reply, o)
			}
		default:
			t.Fatalf("unexpected error kind: %v", err)
		}
	})
}

// readOrHang reads qty items with fc from slave 1, failing the fuzz target
// if the read does not return: a client fed reply must not wait past its
// one-second timeout, and a fuzzer cannot wait for go test's own timeout.
func readOrHang(t *testing.T, c *Client, fc byte, qty uint16, reply []byte) ([]byte, error) {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := c.Read(context.Background(), 1, fc, 0, qty)
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-time.After(hangMargin):
		t.Fatalf("Read hung on reply % x", reply)
		return nil, nil
	}
}
