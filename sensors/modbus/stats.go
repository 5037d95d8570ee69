package modbus

import (
	"context"
	"errors"
	"sync/atomic"

	gm "github.com/goburrow/modbus"
)

// Stats counts what a [Client] did since it was made. Every call to
// [Client.Read] or [Client.Write] that passes validation on an open Client
// ends up in exactly one of Responses, Broadcasts, Timeouts, CRCErrors,
// FrameErrors, IOErrors and Canceled; Exceptions is a part of Responses.
// Requests counts only what reached the wire, reads and writes; Writes is
// the part of Requests that were writes.
type Stats struct {
	Requests      uint64 // requests written to the link, reads and writes
	Writes        uint64 // write requests written to the link (also in Requests)
	Responses     uint64 // well-formed replies: data, a write's echo, or a Modbus exception
	Broadcasts    uint64 // broadcast writes sent, which get no reply
	BytesSent     uint64 // bytes written, frames and headers included
	BytesReceived uint64 // bytes read, discarded ones included
	Discarded     uint64 // bytes thrown away: stale input before a request, replies with a stale TCP transaction id

	Timeouts    uint64 // ErrTimeout: no reply at all
	CRCErrors   uint64 // ErrCRC
	Exceptions  uint64 // Modbus exception replies (also counted in Responses)
	FrameErrors uint64 // ErrShortFrame, ErrUnexpectedReply (ErrLateReply included: well-formed, not garbled) and ErrLineBusy
	IOErrors    uint64 // the link failed: open, dial, read or write
	Canceled    uint64 // ctx ended before the request was sent or its reply judged
}

// counters is the live, lock-free form of Stats: Stats() must not wait
// behind a request that holds the bus for up to a full timeout.
type counters struct {
	requests, writes, responses, broadcasts, sent, received, discarded atomic.Uint64
	timeouts, crc, exceptions, frame, io, canceled                     atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Requests:      c.requests.Load(),
		Writes:        c.writes.Load(),
		Responses:     c.responses.Load(),
		Broadcasts:    c.broadcasts.Load(),
		BytesSent:     c.sent.Load(),
		BytesReceived: c.received.Load(),
		Discarded:     c.discarded.Load(),
		Timeouts:      c.timeouts.Load(),
		CRCErrors:     c.crc.Load(),
		Exceptions:    c.exceptions.Load(),
		FrameErrors:   c.frame.Load(),
		IOErrors:      c.io.Load(),
		Canceled:      c.canceled.Load(),
	}
}

// sentRequest counts r as written to the link.
func (c *counters) sentRequest(r *request) {
	c.requests.Add(1)
	if r.isWrite() {
		c.writes.Add(1)
	}
}

// record counts the outcome of one exchange of r.
func (c *counters) record(r *request, err error) {
	var mbErr *gm.ModbusError
	switch {
	case err == nil && r.broadcast:
		c.broadcasts.Add(1)
	case err == nil:
		c.responses.Add(1)
	case errors.As(err, &mbErr):
		c.responses.Add(1)
		c.exceptions.Add(1)
	case errors.Is(err, ErrTimeout):
		c.timeouts.Add(1)
	case errors.Is(err, ErrCRC):
		c.crc.Add(1)
	case errors.Is(err, ErrShortFrame), errors.Is(err, ErrUnexpectedReply), errors.Is(err, ErrLineBusy):
		c.frame.Add(1)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		c.canceled.Add(1)
	default:
		c.io.Add(1)
	}
}
