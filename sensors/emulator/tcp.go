package emulator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ServeTCP answers Modbus TCP requests (MBAP header; the unit id selects the
// device) on connections accepted from ln, any number at once, until ctx is
// done; then it closes ln and every connection, waits for them, and returns
// nil. It returns early with an error only if Accept fails. Requests on one
// connection are answered in order, each after the device's turnaround.
func (e *Emulator) ServeTCP(ctx context.Context, ln net.Listener) error {
	return e.serveListener(ctx, ln, "tcp", e.serveMBAP)
}

// serveListener accepts connections from ln and runs serve on each in its
// own goroutine, which it owns: when ctx ends or Accept fails, it closes the
// listener and the connections and waits for every goroutine.
func (e *Emulator) serveListener(ctx context.Context, ln net.Listener, kind string, serve func(context.Context, net.Conn) error) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("emulator: %s: accept: %w", kind, err)
		}
		wg.Go(func() {
			defer c.Close()
			// Closing the conn is what unblocks a Read when ctx ends.
			unhook := context.AfterFunc(ctx, func() { _ = c.Close() })
			defer unhook()
			log := e.log.With("transport", kind, "remote", c.RemoteAddr().String())
			log.Debug("emulator: connection accepted")
			err := serve(ctx, c)
			switch {
			case ctx.Err() != nil, err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
				log.Debug("emulator: connection closed")
			default:
				log.Warn("emulator: connection closed", "err", err)
			}
		})
	}
}

// mbapLen is the length of the Modbus TCP (MBAP) header, unit id included.
const mbapLen = 7

// serveMBAP answers Modbus TCP requests on one connection until it closes.
func (e *Emulator) serveMBAP(ctx context.Context, c net.Conn) error {
	be := binary.BigEndian
	var hdr [mbapLen]byte
	pdu := make([]byte, 0, 253)
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return err
		}
		arrived := time.Now()
		proto, length := be.Uint16(hdr[2:]), int(be.Uint16(hdr[4:]))
		if length < 2 || length > 254 {
			// The length is the only framing TCP has: past a bad one the
			// stream cannot be trusted any more.
			return fmt.Errorf("emulator: tcp: MBAP length %d outside 2..254", length)
		}
		pdu = pdu[:length-1]
		if _, err := io.ReadFull(c, pdu); err != nil {
			return err
		}
		if proto != 0 {
			e.log.Debug("emulator: ignoring a non-Modbus MBAP frame", "protocol", proto)
			continue
		}
		rep := e.handle(hdr[6], pdu, false)
		if rep.pdu == nil {
			continue
		}
		out := make([]byte, mbapLen, mbapLen+len(rep.pdu))
		copy(out, hdr[:2]) // transaction id, echoed
		be.PutUint16(out[4:], uint16(1+len(rep.pdu)))
		out[6] = hdr[6]
		out = append(out, rep.pdu...)
		if sleepUntil(ctx, arrived.Add(rep.wait), false) != nil {
			return nil
		}
		if _, err := c.Write(out); err != nil {
			return err
		}
	}
}
