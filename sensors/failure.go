package sensors

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	gm "github.com/goburrow/modbus"

	"fieldlink/sensors/modbus"
)

// FailureKind is what a device's last failed poll ran into, taken from
// the error's kind where it arises rather than read back from its text:
// the status page says it in a technician's words.
type FailureKind uint8

// Failure kinds.
const (
	NoFailure     FailureKind = iota
	FailTimeout               // no reply before the deadline
	FailCRC                   // a garbled reply: a CRC mismatch, or cut mid-frame
	FailReply                 // a reply that answers another request
	FailLineBusy              // the line carried bytes nobody asked for
	FailException             // a Modbus exception reply; see Failure.Exception
	FailLink                  // the link itself: the connection or the port failed
	FailOther                 // anything else; see Failure.Detail
)

func (k FailureKind) String() string {
	return [...]string{"none", "timeout", "crc", "reply", "line busy", "exception", "link", "other"}[k]
}

// Failure is a device's last failed poll, by kind.
type Failure struct {
	Kind FailureKind
	// Exception is the Modbus exception code, for FailException.
	Exception byte
	// Detail is the error below the device's own name (which the page
	// shows already): "read holding 0+2: modbus: ...".
	Detail string
	// Hint is what to check, as the bus's log says it ([BusOptions.Hint]);
	// "" when it has nothing to add.
	Hint string
	// Link is how the link failed, for FailLink on a network link, and
	// Addr the address it was dialling ("" when unknown).
	Link LinkKind
	Addr string
}

// LinkKind is how a network link (Modbus TCP, RTU over TCP) failed to
// connect, from the system's error where it arose.
type LinkKind uint8

// Link kinds.
const (
	LinkOther       LinkKind = iota // another failure of the link, or not a network one
	LinkRefused                     // the address refuses connections: nothing listens there
	LinkNoAnswer                    // the connection was not answered before the deadline
	LinkUnreachable                 // no route to the address
	LinkDNS                         // the name does not resolve
)

// linkKindOf classifies a failure to connect to a network link.
func linkKindOf(err error) (LinkKind, string) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return LinkOther, ""
	}
	addr := ""
	if op.Addr != nil {
		addr = op.Addr.String()
	}
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return LinkDNS, dns.Name
	case errors.Is(err, syscall.ECONNREFUSED):
		return LinkRefused, addr
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return LinkUnreachable, addr
	case op.Timeout():
		return LinkNoAnswer, addr
	}
	return LinkOther, addr
}

// FailureOf classifies err, a device's failed poll; the zero Failure when
// err is nil. Hint is left to the caller, which knows its bus's.
func FailureOf(err error) Failure {
	if err == nil {
		return Failure{}
	}
	f := Failure{Kind: FailOther, Detail: err.Error()}
	var de *deviceError
	if errors.As(err, &de) {
		f.Detail = de.err.Error()
	}
	var mb *gm.ModbusError
	var op *net.OpError
	var pe *os.PathError
	var se *os.SyscallError
	var errno syscall.Errno
	switch {
	case errors.As(err, &mb):
		f.Kind, f.Exception = FailException, mb.ExceptionCode
	case errors.Is(err, modbus.ErrTimeout):
		f.Kind = FailTimeout
	case errors.Is(err, modbus.ErrCRC), errors.Is(err, modbus.ErrShortFrame):
		f.Kind = FailCRC
	case errors.Is(err, modbus.ErrUnexpectedReply):
		f.Kind = FailReply
	case errors.Is(err, modbus.ErrLineBusy):
		f.Kind = FailLineBusy
	case errors.As(err, &op), errors.As(err, &pe), errors.As(err, &se), errors.As(err, &errno),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), IsPortError(err):
		f.Kind = FailLink
		f.Link, f.Addr = linkKindOf(err)
	}
	return f
}

// deviceError is a device's failure with the device named before its
// cause: the log and DeviceStatus.LastError read it whole, the status page
// its cause alone (Failure.Detail), without naming the device again.
type deviceError struct {
	who string // "device ch4-1 (slave 1 on bus a)", "sensor sonic-1"
	err error
}

func (e *deviceError) Error() string { return e.who + ": " + e.err.Error() }
func (e *deviceError) Unwrap() error { return e.err }
