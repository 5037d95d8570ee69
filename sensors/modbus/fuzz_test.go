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

// fuzzFunctions are the functions the fuzz targets send; the fuzzed fc
// byte picks one, and 1..6, 15 and 16 pick themselves.
var fuzzFunctions = [8]byte{1, 2, 3, 4, 5, 6, 15, 16}

// fuzzRequest makes a valid request to slave 1, address 0, out of two
// fuzzed numbers: its function, quantity and, for a write, data, and the
// number of data bytes a read's reply must carry.
func fuzzRequest(fcSeed byte, n uint16) (fc byte, qty uint16, data []byte, want int) {
	fc = fuzzFunctions[(fcSeed-1)%8]
	switch fc {
	case 1, 2:
		qty = 1 + n%2000
		want = (int(qty) + 7) / 8
	case 3, 4:
		qty = 1 + n%125
		want = 2 * int(qty)
	case 5:
		qty, data = 1, []byte{0xFF, 0}
		if n%2 == 0 {
			data = []byte{0, 0}
		}
	case 6:
		qty, data = 1, []byte{byte(n >> 8), byte(n)}
	case 15:
		qty = 1 + n%1968
		data = make([]byte, (qty+7)/8)
		for i := range data {
			data[i] = byte(n) + byte(37*i)
		}
		if used := qty % 8; used != 0 {
			data[len(data)-1] &= 1<<used - 1
		}
	case 16:
		qty = 1 + n%123
		data = make([]byte, 2*qty)
		for i := range data {
			data[i] = byte(n>>8) ^ byte(i)
		}
	}
	return fc, qty, data, want
}

// writeEcho is what the reply to a write of slave 1 at address 0 must
// carry after its function code, by the specification: the request for fc
// 5 and 6, address and quantity for fc 15 and 16. nil for a read.
func writeEcho(fc byte, qty uint16, data []byte) []byte {
	switch fc {
	case 5, 6:
		return append([]byte{0, 0}, data...)
	case 15, 16:
		return []byte{0, 0, byte(qty >> 8), byte(qty)}
	}
	return nil
}

// FuzzRTUResponse feeds arbitrary bytes to the client as a slave's reply
// to a read or a write. It must never panic or hang, it may only return
// data that a correct frame (checked with an independent CRC) carried, and
// it may only accept a write whose exact echo came back.
func FuzzRTUResponse(f *testing.F) {
	f.Add(byte(3), uint16(2), uint8(1), withCRC(1, 3, 4, 0x12, 0x34, 0x56, 0x78))
	f.Add(byte(1), uint16(10), uint8(3), withCRC(1, 1, 2, 0xff, 0x03))
	f.Add(byte(4), uint16(1), uint8(255), withCRC(1, 0x84, 2))
	f.Add(byte(2), uint16(8), uint8(1), withCRC(2, 2, 1, 0xaa))
	f.Add(byte(3), uint16(2), uint8(2), []byte{1, 3, 4, 0x12})
	f.Add(byte(3), uint16(125), uint8(7), []byte("garbage, not a frame"))
	f.Add(byte(3), uint16(1), uint8(1), []byte{})
	f.Add(byte(5), uint16(1), uint8(8), withCRC(1, 5, 0, 0, 0xFF, 0))
	f.Add(byte(6), uint16(0x1234), uint8(2), withCRC(1, 6, 0, 0, 0x12, 0x34))
	f.Add(byte(6), uint16(0x1234), uint8(2), withCRC(1, 6, 0, 0, 0x12, 0x35))
	f.Add(byte(15), uint16(9), uint8(3), withCRC(1, 15, 0, 0, 0, 10))
	f.Add(byte(16), uint16(1), uint8(3), withCRC(1, 16, 0, 0, 0, 2))
	f.Add(byte(16), uint16(1), uint8(3), withCRC(1, 0x90, 3))
	f.Add(byte(16), uint16(1), uint8(4), withCRC(1, 16, 0, 0, 0, 2, 4, 0, 0, 0, 1))

	f.Fuzz(func(t *testing.T, fcSeed byte, n uint16, chunk uint8, reply []byte) {
		fc, qty, wdata, want := fuzzRequest(fcSeed, n)
		echo := writeEcho(fc, qty, wdata)
		link := &replayLink{reply: reply, chunk: 1 + int(chunk)}
		c := NewRTU(link, 115200, Options{Timeout: time.Second})
		data, err := doOrHang(t, c, fc, qty, wdata, reply)

		var me *gm.ModbusError
		switch {
		case err == nil && echo != nil:
			if len(reply) < 8 || reply[0] != 1 || reply[1] != fc || !bytes.Equal(reply[2:6], echo) ||
				crc16(reply[:6]) != binary.LittleEndian.Uint16(reply[6:8]) {
				t.Fatalf("accepted an invalid reply % x to a write fc %d qty %d (echo % x)", reply, fc, qty, echo)
			}
			if data != nil {
				t.Fatalf("a write returned data % x", data)
			}
		case err == nil:
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
		checkSettled(t, err)
	})
}

// checkSettled: an error after a request went out is unsettled unless it
// is an exception.
func checkSettled(t *testing.T, err error) {
	t.Helper()
	var me *gm.ModbusError
	if unsettled(err) == (err == nil || errors.As(err, &me)) {
		t.Fatalf("unsettled(%v) = %v", err, unsettled(err))
	}
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

func mbapOracle(reply []byte, fc byte, want int, echo []byte) mbapOutcome {
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
		case echo != nil:
			if pdu[0] == fc && bytes.Equal(pdu[1:], echo) {
				return mbapOutcome{data: []byte{}, exception: -1}
			}
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
// server's reply to a read or a write: MBAP header (transaction id,
// protocol id, length, unit id) and PDU. It must never panic or hang, and
// its verdict must match mbapOracle's.
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
	f.Add(byte(5), uint16(2), uint8(3), mbap(1, 1, 5, 0, 0, 0, 0))
	f.Add(byte(6), uint16(0x1234), uint8(12), mbap(1, 1, 6, 0, 0, 0x12, 0x34))
	f.Add(byte(6), uint16(0x1234), uint8(12), mbap(1, 1, 6, 0, 0, 0x12))
	f.Add(byte(15), uint16(9), uint8(5), mbap(1, 1, 15, 0, 0, 0, 10))
	f.Add(byte(16), uint16(1), uint8(5), mbap(1, 1, 16, 0, 0, 0, 2))
	f.Add(byte(16), uint16(1), uint8(5), mbap(1, 1, 16, 0, 0, 0, 2, 0))
	f.Add(byte(16), uint16(1), uint8(5), mbap(1, 1, 0x90, 2))

	f.Fuzz(func(t *testing.T, fcSeed byte, n uint16, chunk uint8, reply []byte) {
		fc, qty, wdata, want := fuzzRequest(fcSeed, n)
		conn := &replayConn{replayLink{reply: reply, chunk: 1 + int(chunk)}}
		c := newClient(Options{Timeout: time.Second}, false)
		c.tr = newTCPTransport("fuzz", func(context.Context, time.Time) (net.Conn, error) { return conn, nil }, &c.stats, c.log)
		data, err := doOrHang(t, c, fc, qty, wdata, reply)

		o := mbapOracle(reply, fc, want, writeEcho(fc, qty, wdata))
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
		checkSettled(t, err)
	})
}

// doOrHang reads qty items with fc from slave 1 at address 0, or writes
// data there when fc is a write, failing the fuzz target if the request
// does not return: a client fed reply must not wait past its one-second
// timeout, and a fuzzer cannot wait for go test's own timeout.
func doOrHang(t *testing.T, c *Client, fc byte, qty uint16, wdata, reply []byte) ([]byte, error) {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		if writeEcho(fc, qty, wdata) != nil {
			done <- result{nil, c.Write(context.Background(), 1, fc, 0, qty, wdata)}
			return
		}
		data, err := c.Read(context.Background(), 1, fc, 0, qty)
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-time.After(hangMargin):
		t.Fatalf("fc %d hung on reply % x", fc, reply)
		return nil, nil
	}
}
