package sensors_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/sensors/emulator"
)

// --- Modbus TCP ------------------------------------------------------------

// startHostileTCP serves units 1 and 2 on one TCP endpoint: requests are
// relayed to the emulator, except those for unit 2 while it misbehaves.
func startHostileTCP(t *testing.T, h *hostile, emu *emulator.Emulator) string {
	upstream := testtool.ServeLoopback(t, emu.ServeTCP)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c, true)
			wg.Go(func() {
				defer func() { track(c, false); _ = c.Close() }()
				serveHostileMBAP(ctx, c, upstream, h)
			})
		}
	})
	t.Cleanup(func() {
		cancel()
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		h.stop()
		wg.Wait()
	})
	return "tcp://" + ln.Addr().String()
}

func serveHostileMBAP(ctx context.Context, c net.Conn, upstream string, h *hostile) {
	up, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer up.Close()
	var wmu sync.Mutex
	write := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := c.Write(b)
		return err
	}
	be := binary.BigEndian
	for ctx.Err() == nil {
		req := make([]byte, 12)
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		tid, unit, fc, qty := be.Uint16(req), req[6], req[7], be.Uint16(req[10:])
		b := h.behaviour()
		if unit != badSlave || b == behaveWell {
			if _, err := up.Write(req); err != nil {
				return
			}
			hdr := make([]byte, 7)
			if _, err := io.ReadFull(up, hdr); err != nil {
				return
			}
			rest := make([]byte, int(be.Uint16(hdr[4:]))-1)
			if _, err := io.ReadFull(up, rest); err != nil {
				return
			}
			if write(append(hdr, rest...)) != nil {
				return
			}
			continue
		}
		mbap := func(tid uint16, unit byte, pdu []byte, length int) []byte {
			out := make([]byte, 7, 7+len(pdu))
			be.PutUint16(out, tid)
			be.PutUint16(out[4:], uint16(length))
			out[6] = unit
			return append(out, pdu...)
		}
		data := replyData(fc, qty)
		good := append([]byte{fc, byte(len(data))}, data...)
		switch b {
		case endless:
			// Well-formed replies with a stale transaction id, forever.
			h.start(ctx, func(ctx context.Context) {
				for ctx.Err() == nil {
					if write(mbap(tid-1, badSlave, good, 1+len(good))) != nil {
						return
					}
				}
			})
		case drip:
			frame := mbap(tid, badSlave, good, 1+len(good))
			h.start(ctx, func(ctx context.Context) {
				for i, x := range frame {
					if i > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(dripEvery):
						}
					}
					if write([]byte{x}) != nil {
						return
					}
				}
			})
		case randomLength:
			// The header announces the right length; the data is not.
			_, pdu := h.badPDU(b, fc, qty)
			_ = write(mbap(tid, badSlave, pdu, 1+len(good)))
		default:
			u, pdu := h.badPDU(b, fc, qty)
			_ = write(mbap(tid, u, pdu, 1+len(pdu)))
		}
	}
}
