package sensors

import (
	"errors"
	"io/fs"
	"syscall"
	"time"

	"go.bug.st/serial"
)

// PortKind is why a serial port cannot be opened, as the system said it:
// what a technician on site has to do about it differs by kind.
type PortKind uint8

// Port kinds.
const (
	PortOK        PortKind = iota // open, or not failed yet
	PortMissing                   // no such device: adapter unplugged, not enumerated yet, or renamed
	PortForbidden                 // permission denied: the user lacks the dialout group
	PortBusy                      // another program holds it
	PortFailed                    // it exists and may be used, but would not open or configure
)

func (k PortKind) String() string {
	return [...]string{"ok", "missing", "permission denied", "busy", "failed"}[k]
}

// PortError is a serial port that could not be opened, with its kind.
type PortError struct {
	Port string
	Kind PortKind
	Err  error // the open's own error
}

func (e *PortError) Error() string { return e.Err.Error() }

func (e *PortError) Unwrap() error { return e.Err }

// Advice says in a technician's words what is wrong with the port and what
// to check.
func (e *PortError) Advice() string {
	switch e.Kind {
	case PortMissing:
		return "port " + e.Port + " missing: is the adapter plugged in?"
	case PortForbidden:
		return "port " + e.Port + ": permission denied: is the service's user in the dialout group?"
	case PortBusy:
		return "port " + e.Port + " busy: another program holds it"
	}
	return "port " + e.Port + " does not open: " + e.Err.Error()
}

// PortErrorOf gives err, the failure to open port, its kind, from the
// system's error number (or the serial library's code, which replaces
// EACCES and EBUSY); nil when err is nil.
func PortErrorOf(port string, err error) *PortError {
	if err == nil {
		return nil
	}
	var pe *PortError
	if errors.As(err, &pe) {
		return pe
	}
	return &PortError{Port: port, Kind: portKind(err), Err: err}
}

// portKind classifies a failure to open a port; PortFailed when it is
// none of the kinds a technician can act on by kind.
func portKind(err error) PortKind {
	var se *serial.PortError
	if errors.As(err, &se) {
		switch se.Code() {
		case serial.PortBusy:
			return PortBusy
		case serial.PermissionDenied:
			return PortForbidden
		case serial.PortNotFound:
			return PortMissing
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.ENXIO):
		// ENODEV and ENXIO: the device node outlived the adapter.
		return PortMissing
	case errors.Is(err, fs.ErrPermission):
		return PortForbidden
	case errors.Is(err, syscall.EBUSY):
		return PortBusy
	}
	return PortFailed
}

// IsPortError reports whether err is a port's failure to open of a kind a
// technician can act on (missing, forbidden, busy): on a running bus such
// an error means the port went away, not that a device fails.
func IsPortError(err error) bool {
	k := portKind(err)
	return k == PortMissing || k == PortForbidden || k == PortBusy
}

// PortState is whether a bus's (or a serial sensor's) serial port is open.
type PortState struct {
	// Err is why the port is down; nil while it is open, or before its
	// first open.
	Err *PortError
	// Since is when the port went down.
	Since time.Time
}

// Kind is the kind of the port's problem; PortOK when it is not down.
func (s PortState) Kind() PortKind {
	if s.Err == nil {
		return PortOK
	}
	return s.Err.Kind
}

// Down reports whether the port is down.
func (s PortState) Down() bool { return s.Err != nil }

// set records err (nil: the port opened) at now, and reports whether the
// state changed in a way worth a log line: up, down, or down for another
// kind.
func (s *PortState) set(pe *PortError, now time.Time) bool {
	was := s.Kind()
	switch {
	case pe == nil:
		s.Err = nil
		s.Since = time.Time{}
	case s.Err == nil:
		s.Err, s.Since = pe, now
	default:
		s.Err = pe // Since stays: down since the first failure
	}
	return s.Kind() != was
}

// Port retry delays: the first retry soon after a failure (an adapter
// still enumerating at boot), then doubling up to a cap, so that a port
// plugged in later is found within half a minute without polling it hard.
const (
	portRetryFirst = time.Second
	portRetryMax   = 30 * time.Second
)

// portRetry is the delay before the next open after n failed ones (n ≥ 1).
func portRetry(n int) time.Duration {
	if n > 6 {
		return portRetryMax
	}
	return min(portRetryFirst<<(n-1), portRetryMax)
}
