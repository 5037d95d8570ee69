package modbus

import (
	"encoding/binary"
	"io"
	"math/bits"
	"net"
	"os"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/sensors/emulator"
)

// hangMargin is how far past its deadline a request may end before a test
// calls it a hang: generous, because CI machines are shared and slow.
const hangMargin = 5 * time.Second

// crc16 is CRC-16/MODBUS computed from its catalogue definition (width 16,
// poly 0x8005, init 0xFFFF, input and output reflected): the oracle the
// client's CRC checks are tested against. It is deliberately independent:
// not goburrow's table, which the client uses, nor the emulator's
// pre-reflected loop (poly 0xA001), which forges the tests' other frames;
// TestCRCOracle pins it to the catalogue's check value.
func crc16(b []byte) uint16 {
	crc := uint16(0xFFFF)
	for _, x := range b {
		crc ^= uint16(bits.Reverse8(x)) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x8005
			} else {
				crc <<= 1
			}
		}
	}
	return bits.Reverse16(crc)
}

// TestCRCOracle: the catalogue's check value of CRC-16/MODBUS, the CRC
// of "123456789", is 0x4B37, and the emulator agrees on frames of every
// length up to 256 bytes.
func TestCRCOracle(t *testing.T) {
	if got := crc16([]byte("123456789")); got != 0x4B37 {
		t.Fatalf("crc16(123456789) = %#04x, want 0x4B37", got)
	}
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i*7 + 3)
		if got, want := crc16(b[:i]), emulator.CRC16(b[:i]); got != want {
			t.Fatalf("%d bytes: oracle %#04x, emulator %#04x", i, got, want)
		}
	}
}

// withCRC returns b followed by its CRC, low byte first as on the wire.
func withCRC(b ...byte) []byte {
	c := crc16(b)
	return append(append([]byte(nil), b...), byte(c), byte(c>>8))
}

// The register model every in-test slave serves: register a holds
// 0x1000+a (input registers 0x2000+a), coil a is on when a%3 == 0,
// discrete input a when a%2 == 1.
func modelData(fc byte, addr, qty uint16) []byte {
	switch fc {
	case 1, 2:
		out := make([]byte, (int(qty)+7)/8)
		for i := range int(qty) {
			a := int(addr) + i
			on := a%3 == 0
			if fc == 2 {
				on = a%2 == 1
			}
			if on {
				out[i/8] |= 1 << (i % 8)
			}
		}
		return out
	default:
		base := uint16(0x1000)
		if fc == 4 {
			base = 0x2000
		}
		out := make([]byte, 2*int(qty))
		for i := range int(qty) {
			binary.BigEndian.PutUint16(out[2*i:], base+addr+uint16(i))
		}
		return out
	}
}

// modelPDU is the reply PDU (function, byte count, data) for a read request
// PDU (function, address, quantity).
func modelPDU(req []byte) []byte {
	fc := req[0]
	data := modelData(fc, binary.BigEndian.Uint16(req[1:]), binary.BigEndian.Uint16(req[3:]))
	return append([]byte{fc, byte(len(data))}, data...)
}

// modelRTU is a slave's RTU reply to an RTU request frame.
func modelRTU(req []byte) []byte {
	return withCRC(append([]byte{req[0]}, modelPDU(req[1:6])...)...)
}

// handler decides a slave's reply to its n-th request (from 0). A nil reply
// means silence.
type handler func(n int, req []byte) []byte

// serveRTU answers RTU requests arriving on conn with h until conn closes.
// It fails the test if a request is not 8 bytes with a valid CRC.
func serveRTU(t *testing.T, conn io.ReadWriter, h handler) {
	req := make([]byte, 8)
	for n := 0; ; n++ {
		if _, err := io.ReadFull(conn, req); err != nil {
			return
		}
		if crc16(req[:6]) != binary.LittleEndian.Uint16(req[6:]) {
			t.Errorf("slave: request % x has a bad CRC", req)
		}
		if reply := h(n, append([]byte(nil), req...)); len(reply) > 0 {
			if _, err := conn.Write(reply); err != nil {
				return
			}
		}
	}
}

// pipeClient returns an RTU Client whose link is net.Pipe, with a slave
// goroutine answering through h. The slave is stopped and waited for when
// the test ends.
func pipeClient(t *testing.T, baud int, timeout time.Duration, h handler) *Client {
	t.Helper()
	ours, theirs := net.Pipe()
	c := NewRTU(ours, baud, Options{Timeout: timeout, Logger: testtool.Logger(t)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveRTU(t, theirs, h)
	}()
	t.Cleanup(func() {
		_ = c.Close()
		_ = theirs.Close()
		<-done
	})
	return c
}

// model is a handler that always answers correctly.
func model(_ int, req []byte) []byte { return modelRTU(req) }

// firstThen answers the first request with fault(req) and later ones from
// the model.
func firstThen(fault func(req []byte) []byte) handler {
	return func(n int, req []byte) []byte {
		if n == 0 {
			return fault(req)
		}
		return modelRTU(req)
	}
}

// pipeLink is a buffered, full-duplex byte stream made of two OS pipes: a
// serial line whose receive buffer holds bytes until read, unlike net.Pipe
// where a write waits for its reader.
type pipeLink struct {
	r, w *os.File
}

func (l pipeLink) Read(p []byte) (int, error)        { return l.r.Read(p) }
func (l pipeLink) Write(p []byte) (int, error)       { return l.w.Write(p) }
func (l pipeLink) SetReadDeadline(t time.Time) error { return l.r.SetReadDeadline(t) }
func (l pipeLink) Close() error {
	e1, e2 := l.r.Close(), l.w.Close()
	if e1 != nil {
		return e1
	}
	return e2
}

// bufferedLine returns both ends of a buffered line.
func bufferedLine(t *testing.T) (master, slave pipeLink) {
	t.Helper()
	r1, w1, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return pipeLink{r: r1, w: w2}, pipeLink{r: r2, w: w1}
}
