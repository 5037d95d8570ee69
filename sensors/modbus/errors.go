package modbus

import "errors"

// Errors returned by [Client.Read]. They are always wrapped with the slave,
// function, address and quantity of the failed request, so test them with
// [errors.Is]. A Modbus exception reply is not one of these: it is returned as
// a wrapped *[gm.ModbusError] carrying the exception code (use [errors.As]).
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
	// request: another slave id or function code, a wrong byte count, a bad
	// Modbus TCP header, or garbage. Two devices sharing one address cause it.
	ErrUnexpectedReply = errors.New("modbus: unexpected reply")

	// ErrLineBusy means a serial line (or RTU-over-TCP stream) kept
	// carrying bytes nobody asked for until the request's deadline, so the
	// request was not sent: a device babbling or answering out of turn.
	ErrLineBusy = errors.New("modbus: line busy")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("modbus: client closed")
)
