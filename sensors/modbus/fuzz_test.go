package modbus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
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
		done := make(chan struct{})
		var data []byte
		var err error
		go func() {
			defer close(done)
			data, err = c.Read(context.Background(), 1, fc, 0, qty)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Read hung on reply % x", reply)
		}

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
