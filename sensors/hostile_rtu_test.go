package sensors_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.bug.st/serial"

	"fieldlink/internal/testtool"
	"fieldlink/sensors/emulator"
)

// --- RTU: a shared serial line -------------------------------------------

func rtuFrame(b ...byte) []byte {
	c := emulator.CRC16(b)
	return append(b, byte(c), byte(c>>8))
}

// rtuLine is the slaves' end of a pty pair: it hands every request frame
// either to the emulator (through tap) or, for slave 2 while it misbehaves,
// to the hostile device. Both write to the same port, as two devices on one
// RS-485 line do.
type rtuLine struct {
	port serial.Port
	wmu  sync.Mutex
	tap  *tapPort
	h    *hostile
}

func (l *rtuLine) write(b []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	_, err := l.port.Write(b)
	return err
}

// run frames the master's requests (8-byte reads) until ctx ends.
func (l *rtuLine) run(ctx context.Context) error {
	if err := l.port.SetReadTimeout(20 * time.Millisecond); err != nil {
		return err
	}
	var buf []byte
	tmp := make([]byte, 256)
	for ctx.Err() == nil {
		n, err := l.port.Read(tmp)
		if err != nil {
			return err
		}
		buf = append(buf, tmp[:n]...)
		for len(buf) >= 8 {
			f := buf[:8]
			if emulator.CRC16(f[:6]) != binary.LittleEndian.Uint16(f[6:]) {
				buf = buf[1:] // resynchronise
				continue
			}
			frame := append([]byte(nil), f...)
			buf = buf[8:]
			if frame[0] == badSlave && l.h.behaviour() != behaveWell {
				l.misbehave(ctx, frame)
				continue
			}
			l.tap.feed(frame)
		}
	}
	return nil
}

func (l *rtuLine) misbehave(ctx context.Context, req []byte) {
	fc, qty := req[1], binary.BigEndian.Uint16(req[4:])
	switch b := l.h.behaviour(); b {
	case endless:
		// Starts like the right reply, then never stops talking.
		want := len(replyData(fc, qty))
		l.h.start(ctx, func(ctx context.Context) {
			_ = l.write([]byte{badSlave, fc, byte(want)})
			end := time.Now().Add(l.h.streamFor)
			// As fast as the line takes it: each write waits for room
			// in the pty, so the master never finds it empty for long
			// enough to pass for a silence, however loaded the machine
			// (a writer that slept between writes left gaps of tens of
			// milliseconds on a busy machine, and the good device's
			// requests went out into the stream).
			for time.Now().Before(end) && ctx.Err() == nil {
				if l.write(l.h.bytes(64)) != nil {
					return
				}
			}
		})
	case drip:
		data := replyData(fc, qty)
		frame := rtuFrame(append([]byte{badSlave, fc, byte(len(data))}, data...)...)
		l.h.start(ctx, func(ctx context.Context) {
			for i, c := range frame {
				if i > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(dripEvery):
					}
				}
				if l.write([]byte{c}) != nil {
					return
				}
			}
		})
	default:
		unit, pdu := l.h.badPDU(b, fc, qty)
		_ = l.write(rtuFrame(append([]byte{unit}, pdu...)...))
	}
}

// tapPort is the emulator's view of the line: it reads only the frames the
// line hands it, and writes to the shared port.
type tapPort struct {
	line    *rtuLine
	in      chan []byte
	pending []byte
	timeout time.Duration
}

func (p *tapPort) feed(frame []byte) { p.in <- frame }

func (p *tapPort) Read(b []byte) (int, error) {
	if len(p.pending) == 0 {
		var timer <-chan time.Time
		if p.timeout >= 0 {
			timer = time.After(p.timeout)
		}
		select {
		case p.pending = <-p.in:
		case <-timer:
			return 0, nil
		}
	}
	n := copy(b, p.pending)
	p.pending = p.pending[n:]
	return n, nil
}

func (p *tapPort) Write(b []byte) (int, error) { return len(b), p.line.write(b) }

func (p *tapPort) SetReadTimeout(d time.Duration) error { p.timeout = d; return nil }

// startHostileRTU serves slaves 1 and 2 on one end of a pty pair and
// returns the other end's bus URL.
func startHostileRTU(t *testing.T, h *hostile, emu *emulator.Emulator, baud int) string {
	a, b := testtool.PtyPair(t)
	port, err := emulator.OpenSerial(a, baud, 'N', 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	line := &rtuLine{port: port, h: h}
	line.tap = &tapPort{line: line, in: make(chan []byte, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := line.run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("hostile line: %v", err)
		}
	})
	wg.Go(func() { _ = emu.ServeRTU(ctx, line.tap, baud, emulator.CharBits('N', 8, 1)) })
	t.Cleanup(func() {
		cancel()
		h.stop()
		wg.Wait()
		_ = port.Close()
	})
	return fmt.Sprintf("rtu://%s?baud=%d", b, baud)
}
