package sensors

import (
	"context"
	"errors"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/sensors/modbus"
	"fieldlink/sensors/profile"
)

// Answer is how a slave id answered a scan's probe.
type Answer struct {
	Slave byte
	// Exception is the Modbus exception the slave answered with; nil when
	// it answered the read.
	Exception *gm.ModbusError
	// Err is the exception reply's error as the client returned it.
	Err error
}

// ScanResult is what [Scan] found at one line setting.
type ScanResult struct {
	// Answers are the ids that answered, in the order tried.
	Answers []Answer
	// Garbled counts the replies that came back broken (a bad CRC, a
	// short or unexpected frame): a device may be there at another baud
	// rate or parity.
	Garbled int
	// Late are the well-formed replies read after their request's
	// timeout, while a later id's reply was awaited: a device is there at
	// this line setting, slower to answer than the timeout.
	Late []Late
}

// Late is a slave that answered a scan's probe after its timeout.
type Late struct {
	Slave byte
	// After is how long after its probe the reply ended; 0 when unknown.
	After time.Duration
}

// Scan probes each of ids on c, as gateway scan does, with a read of one
// register of area at address: an id that answers, with the register or
// with a Modbus exception, is a device there; a silent one is not. found,
// if not nil, is told of each answer as it comes. When ctx ends, Scan
// returns what it found so far, the id it was at, and ctx's error.
func Scan(ctx context.Context, c Reader, ids []byte, area profile.Area, address uint16, found func(Answer)) (ScanResult, byte, error) {
	var r ScanResult
	for _, id := range ids {
		if ctx.Err() != nil {
			return r, id, ctx.Err()
		}
		_, err := c.Read(ctx, id, area.FunctionCode(), address, 1)
		if ctx.Err() != nil {
			return r, id, ctx.Err()
		}
		var mbErr *gm.ModbusError
		var late *modbus.LateReplyError
		switch {
		case err == nil:
			r.add(Answer{Slave: id}, found)
		case errors.As(err, &mbErr):
			r.add(Answer{Slave: id, Exception: mbErr, Err: err}, found)
		case errors.As(err, &late):
			r.Late = append(r.Late, Late{Slave: late.Slave, After: late.After})
		case errors.Is(err, modbus.ErrCRC), errors.Is(err, modbus.ErrUnexpectedReply), errors.Is(err, modbus.ErrShortFrame):
			r.Garbled++
		}
	}
	return r, 0, nil
}

func (r *ScanResult) add(a Answer, found func(Answer)) {
	r.Answers = append(r.Answers, a)
	if found != nil {
		found(a)
	}
}
