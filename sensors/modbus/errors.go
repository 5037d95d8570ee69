package modbus

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by [Client.Read] and [Client.Write]. They are always
// wrapped with the slave, function, address and quantity of the failed
// request, so test them with [errors.Is]. A Modbus exception reply is not one
// of these: it is returned as a wrapped *[gm.ModbusError] carrying the
// exception code (use [errors.As]).
var (
	// ErrTimeout means no byte of a reply arrived before the deadline: the
	// slave is silent, powered off, has another address, or the line is cut.
	ErrTimeout = errors.New("modbus: no reply before the deadline (timeout)")

	// ErrCRC means a complete RTU frame arrived but its CRC does not match:
	// noise on the line, a wrong baud rate or parity, or a missing terminator.
	ErrCRC = errors.New("modbus: CRC mismatch in reply")

	// ErrShortFrame means a reply started but stopped before its expected
	// length by the deadline: a collision, a brown-out, or a wrong baud rate.
	ErrShortFrame = errors.New("modbus: reply stopped mid-frame")

	// ErrUnexpectedReply means a reply arrived that does not answer the
	// request: another slave id or function code, a wrong byte count or
	// write echo, a bad Modbus TCP header, or garbage. Two devices sharing
	// one address cause it.
	ErrUnexpectedReply = errors.New("modbus: unexpected reply")

	// ErrLateReply means a well-formed reply (its CRC valid) came from a
	// slave other than the one asked: most often a slave answering after
	// its request's deadline, read while the next request awaited its own
	// reply. A device is there, slower than the timeout; nothing on the
	// line is garbled. It comes as a *[LateReplyError], which also
	// satisfies errors.Is(err, ErrUnexpectedReply): it is a reply that
	// answers another request.
	ErrLateReply = errors.New("modbus: late reply")

	// ErrLineBusy means a serial line (or RTU-over-TCP stream) kept
	// carrying bytes nobody asked for until the request's deadline, so the
	// request was not sent: a device babbling or answering out of turn.
	ErrLineBusy = errors.New("modbus: line busy")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("modbus: client closed")

	// ErrNotSent marks every failure of a request that never reached the
	// wire, so that no slave can have acted on it: a request refused by
	// validation, the wait for the bus abandoned, ctx ended before sending,
	// [ErrLineBusy], [ErrClosed], the link failing to open or dial, or a
	// write to the link that failed without writing a byte. It is added to
	// the error, not in place of it: errors.Is(err, ErrLineBusy) and
	// errors.Is(err, context.Canceled) still hold, and the message is
	// unchanged.
	ErrNotSent = errors.New("modbus: request not sent")
)

// LateReplyError is an [ErrLateReply]: a well-formed reply from Slave,
// not the slave asked.
type LateReplyError struct {
	Slave byte
	// After is how long after this Client's last unanswered request to
	// Slave the reply ended; 0 when no request to Slave is known to have
	// gone unanswered (then a device answers for an id it was not asked).
	After time.Duration
	// Request is the request that read the reply, as "read holding 0+1
	// from slave 2"; Frame the reply's bytes.
	Request string
	Frame   []byte
	// Cut is a reply that began as the slave's answer to its unanswered
	// request but was cut short by Request's deadline: its CRC unread.
	Cut bool
}

func (e *LateReplyError) Error() string {
	if e.Cut {
		return fmt.Sprintf("%v: %s: late reply from slave %d, %v after its request, cut short by this request's deadline (frame starts % x)", ErrUnexpectedReply, e.Request, e.Slave, e.After.Round(time.Millisecond), e.Frame)
	}
	if e.After > 0 {
		return fmt.Sprintf("%v: %s: late reply from slave %d, %v after its request (frame % x)", ErrUnexpectedReply, e.Request, e.Slave, e.After.Round(time.Millisecond), e.Frame)
	}
	return fmt.Sprintf("%v: %s: reply from slave %d, which was not asked (frame % x)", ErrUnexpectedReply, e.Request, e.Slave, e.Frame)
}

// Is makes a late reply both an [ErrLateReply] and an [ErrUnexpectedReply].
func (e *LateReplyError) Is(target error) bool {
	return target == ErrLateReply || target == ErrUnexpectedReply
}

// notSentError adds [ErrNotSent] to an error without changing its message.
type notSentError struct{ err error }

func (e notSentError) Error() string        { return e.err.Error() }
func (e notSentError) Unwrap() error        { return e.err }
func (e notSentError) Is(target error) bool { return target == ErrNotSent }

// notSent marks err as the failure of a request that never reached the wire.
func notSent(err error) error { return notSentError{err} }

// unsettled reports whether err leaves the outcome of a request unknown:
// the request went out (or may have, in part), but no valid reply said
// what the slave did. For a write, the slave may or may not have executed
// it; read the point back to settle it. That is the case for [ErrTimeout],
// [ErrCRC], [ErrShortFrame], [ErrUnexpectedReply] (including a wrong
// echo), ctx ending while the reply was awaited, and an I/O error after
// the request was written.
//
// Settled are nil (the slave answered as the specification says), a
// Modbus exception reply (a *[gm.ModbusError]: the slave answered,
// refusing the request), and [ErrNotSent] (no slave saw the request). An error of any
// other kind counts as unsettled: when in doubt, read back.
//
// A broadcast write returns nil once sent, although no reply settles it.
func unsettled(err error) bool {
	return err != nil && !errors.Is(err, ErrNotSent) && !isException(err)
}

// Hint says, in a technician's words, what to check when a device fails
// with err; "" when there is nothing useful to add.
func Hint(err error) string {
	switch {
	case errors.Is(err, ErrTimeout):
		return "check the wiring (A and B swapped?), the device's power, its slave id and baud rate, or find it with gateway scan"
	case errors.Is(err, ErrCRC), errors.Is(err, ErrShortFrame):
		return "garbled replies: check the bus's baud rate and parity against the device's, the termination resistors and the cable's shield"
	case errors.Is(err, ErrLateReply):
		return "a slave answered after the timeout, or for another slave id: lengthen the bus's timeout, or check that no two devices answer for one id"
	case errors.Is(err, ErrUnexpectedReply):
		return "a reply that answers another request: two devices may share this slave id"
	case errors.Is(err, ErrLineBusy):
		return "a device talks out of turn on the line: disconnect devices one at a time to find it"
	}
	return ""
}
