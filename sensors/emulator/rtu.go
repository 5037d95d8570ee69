package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"time"

	"go.bug.st/serial"

	"fieldlink/internal/serialline"
)

// Port is a serial line as ServeRTU uses it. The go.bug.st/serial port that
// OpenSerial returns satisfies it.
type Port interface {
	io.ReadWriter
	// SetReadTimeout bounds how long each Read waits; a Read that times out
	// returns 0, nil. ServeRTU measures the silences that end frames with
	// it, and notices ctx between reads.
	SetReadTimeout(time.Duration) error
}

// OpenSerial opens a serial port (a USB RS-485 adapter, or one end of a
// socat pty pair) for ServeRTU. parity is 'N', 'E' or 'O'. The caller closes
// the port.
func OpenSerial(path string, baud int, parity byte, dataBits, stopBits int) (serial.Port, error) {
	if _, err := serialline.ParseParity(string(parity)); err != nil {
		return nil, fmt.Errorf("emulator: open %s: parity %q is not N, E or O", path, parity)
	}
	if err := serialline.CheckStopBits(stopBits); err != nil {
		return nil, fmt.Errorf("emulator: open %s: %d stop bits (want 1 or 2)", path, stopBits)
	}
	p, err := serial.Open(path, serialline.Settings{Baud: baud, Parity: parity, DataBits: dataBits, StopBits: stopBits}.Mode())
	if err != nil {
		return nil, fmt.Errorf("emulator: open %s: %w", path, err)
	}
	return p, nil
}

// CharBits is the length in bits of one character on a serial line: start
// bit, data bits, parity bit if any, stop bits. Modbus RTU's 8E1 and 8N2 are
// 11 bits; the common but non-conforming 8N1 is 10.
func CharBits(parity byte, dataBits, stopBits int) int {
	return serialline.Settings{Parity: parity, DataBits: dataBits, StopBits: stopBits}.CharBits()
}

// lineTiming returns the character time and the t3.5 silence of a line:
// 3.5 characters up to 19200 baud, a fixed 1.75 ms above (Modbus over
// Serial Line v1.02 §2.5.1.1).
func lineTiming(baud, bits int) (tc, t35 time.Duration) {
	tc = time.Duration(int64(bits) * int64(time.Second) / int64(baud))
	if baud > 19200 {
		return tc, 1750 * time.Microsecond
	}
	return tc, time.Duration(int64(bits) * int64(time.Second) * 7 / 2 / int64(baud))
}

// ServeRTU answers Modbus RTU requests on a serial line for every emulated
// device until ctx is done, then returns nil; it returns early only on a
// port error. It does not close port.
//
// Replies are paced as on a real bus at baud with bitsPerChar-bit
// characters (see CharBits), so that a pty, which delivers bytes at once,
// behaves like RS-485 and the gateway's poll-cycle benchmark measures
// against real wire time: the whole reply is written when the request's
// wire time, t3.5, the device's turnaround and the reply's wire time have
// passed since the request's first byte arrived. On a real UART, which
// itself takes the reply's wire time to send, replies therefore arrive one
// reply-time late: still correct, only slower.
//
// A request is framed by the length its function code implies (8 bytes for
// reads and single writes, the byte count for 15 and 16); a frame with a bad
// CRC, or noise, is discarded together with everything up to the next
// silence of t3.5, and not answered, as a real slave does.
func (e *Emulator) ServeRTU(ctx context.Context, port Port, baud, bitsPerChar int) error {
	if baud <= 0 {
		return fmt.Errorf("emulator: rtu: baud rate %d", baud)
	}
	if bitsPerChar < 9 || bitsPerChar > 12 {
		return fmt.Errorf("emulator: rtu: %d bits per character (want 9..12, 11 for 8E1)", bitsPerChar)
	}
	tc, t35 := lineTiming(baud, bitsPerChar)
	e.log.Debug("emulator: serving RTU on a serial line", "baud", baud, "bits", bitsPerChar, "t3.5", t35)
	return e.serveRTU(ctx, rtuLine{
		src: &portSource{p: port}, w: port,
		tc: tc, t35: t35, gap: t35, idle: 100 * time.Millisecond, precise: true,
	})
}

// ServeRTUOverTCP answers RTU frames (with CRC) on TCP connections
// accepted from ln, as serial-to-Ethernet servers carry them, until ctx is
// done; then it closes ln and every connection, waits for them, and returns
// nil. Replies wait for the device's turnaround but no wire time.
func (e *Emulator) ServeRTUOverTCP(ctx context.Context, ln net.Listener) error {
	return e.serveListener(ctx, ln, "rtu-over-tcp", func(ctx context.Context, c net.Conn) error {
		return e.serveRTU(ctx, rtuLine{src: connSource{c}, w: c, gap: tcpGap})
	})
}

// tcpGap is the silence that ends a garbled RTU-over-TCP stream. TCP has no
// inter-character timing; a pause this long means the master gave up on
// the frame.
const tcpGap = 20 * time.Millisecond

// rtuMax is the largest RTU frame.
const rtuMax = 256

// frameSource reads with a timeout: n = 0 and a nil error when d passes
// without data; d ≤ 0 waits without limit.
type frameSource interface {
	read(p []byte, d time.Duration) (int, error)
}

type portSource struct {
	p   Port
	cur time.Duration
}

func (s *portSource) read(p []byte, d time.Duration) (int, error) {
	if d <= 0 {
		d = serial.NoTimeout
	}
	if d != s.cur {
		if err := s.p.SetReadTimeout(d); err != nil {
			return 0, err
		}
		s.cur = d
	}
	return s.p.Read(p)
}

type connSource struct{ c net.Conn }

func (s connSource) read(p []byte, d time.Duration) (int, error) {
	var dl time.Time
	if d > 0 {
		dl = time.Now().Add(d)
	}
	_ = s.c.SetReadDeadline(dl) // fails only on a closed conn, which Read reports
	n, err := s.c.Read(p)
	if n > 0 {
		return n, nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, nil
	}
	return n, err
}

// rtuLine is one RTU byte stream and its timing.
type rtuLine struct {
	src     frameSource
	w       io.Writer
	tc      time.Duration // character time; 0 off a serial line
	t35     time.Duration // inter-frame silence paid before each reply; 0 off a serial line
	gap     time.Duration // silence that ends an incomplete frame or garbage
	idle    time.Duration // read timeout while idle, to notice ctx; 0 blocks (the conn is closed on ctx)
	precise bool          // spin the last moments before a reply for sub-millisecond timing
}

// serveRTU frames requests from l and answers them until ctx is done.
func (e *Emulator) serveRTU(ctx context.Context, l rtuLine) error {
	var (
		buf   = make([]byte, 0, 2*rtuMax)
		tmp   = make([]byte, rtuMax)
		first time.Time // arrival of the current frame's first byte
		skip  bool      // discarding input until a silence
	)
	for {
		if ctx.Err() != nil {
			return nil
		}
		timeout := l.idle
		if len(buf) > 0 || skip {
			timeout = l.gap
		}
		n, err := l.src.read(tmp, timeout)
		now := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if n == 0 { // a silence
			skip = false
			if len(buf) > 0 {
				// Only a function whose length the framer does not know
				// ends at a silence; answer it if its CRC holds.
				if frameLen(buf) < 0 && len(buf) >= 4 && crcOK(buf) {
					if err := e.answer(ctx, l, buf, first); err != nil {
						return err
					}
				} else {
					e.discard("incomplete frame", buf)
				}
				buf = buf[:0]
			}
			continue
		}
		if skip {
			continue
		}
		if len(buf) == 0 {
			first = now
		}
		buf = append(buf, tmp[:n]...)
		for len(buf) > 0 {
			need := frameLen(buf)
			if need <= 0 || len(buf) < need {
				if len(buf) > rtuMax {
					e.discard("oversized frame", buf)
					buf, skip = buf[:0], true
				}
				break
			}
			if need > rtuMax || !crcOK(buf[:need]) {
				e.discard("bad CRC", buf)
				buf, skip = buf[:0], true
				break
			}
			if err := e.answer(ctx, l, buf[:need], first); err != nil {
				return err
			}
			buf = buf[:copy(buf, buf[need:])]
			first = now
		}
	}
}

// discard counts and logs RTU input thrown away.
func (e *Emulator) discard(why string, b []byte) {
	e.mu.Lock()
	e.garbage++
	e.mu.Unlock()
	e.log.Debug("emulator: discarding RTU input", "why", why, "bytes", len(b))
}

// answer handles one RTU request frame and writes the reply when it is due.
func (e *Emulator) answer(ctx context.Context, l rtuLine, frame []byte, first time.Time) error {
	rep := e.handle(frame[0], frame[1:len(frame)-2], true)
	if rep.pdu == nil {
		return nil
	}
	out := make([]byte, 0, len(rep.pdu)+3)
	out = append(out, frame[0])
	out = append(out, rep.pdu...)
	c := CRC16(out)
	if rep.badCRC {
		c ^= 0xA5A5
	}
	out = append(out, byte(c), byte(c>>8))
	due := first.Add(time.Duration(len(frame))*l.tc + l.t35 + rep.wait + time.Duration(len(out))*l.tc)
	if sleepUntil(ctx, due, l.precise) != nil {
		return nil // ctx is done; the caller returns
	}
	_, err := l.w.Write(out)
	return err
}

// spinWindow is how long before a precise deadline sleeping stops and
// spinning starts: Go's timers may fire up to a millisecond late, 1.5 % of a
// typical exchange at 9600 baud, which would eat the poll-cycle benchmark's
// 5 % budget.
const spinWindow = 1500 * time.Microsecond

// sleepUntil waits until due, an absolute time, so that delays do not
// accumulate; it returns ctx's error if ctx ends first.
func sleepUntil(ctx context.Context, due time.Time, precise bool) error {
	d := time.Until(due)
	if precise {
		d -= spinWindow
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	if precise {
		for time.Now().Before(due) {
			runtime.Gosched()
		}
	}
	return ctx.Err()
}

// frameLen is the length of the RTU request frame that starts b, as its
// function code implies: 0 when more bytes are needed to tell, -1 for a
// function whose length is not known (it ends at a silence).
func frameLen(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] {
	case 1, 2, 3, 4, 5, 6, 8:
		return 8
	case 7, 11, 12, 17:
		return 4
	case 15, 16:
		if len(b) < 7 {
			return 0
		}
		return 9 + int(b[6])
	case 22:
		return 10
	case 23:
		if len(b) < 11 {
			return 0
		}
		return 13 + int(b[10])
	}
	return -1
}

// crcOK checks the CRC in the last two bytes of an RTU frame.
func crcOK(frame []byte) bool {
	n := len(frame)
	if n < 4 {
		return false
	}
	c := CRC16(frame[:n-2])
	return frame[n-2] == byte(c) && frame[n-1] == byte(c>>8)
}

// CRC16 is the Modbus CRC (polynomial 0xA001 reflected, initial 0xFFFF),
// sent low byte first: the emulator's own, independent of the client's
// (goburrow's table), for tests that forge RTU frames.
func CRC16(b []byte) uint16 {
	c := uint16(0xFFFF)
	for _, x := range b {
		c ^= uint16(x)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xA001
			} else {
				c >>= 1
			}
		}
	}
	return c
}
