package cardstore

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"fieldlink/buffer"
)

// Fault is why the buffer is not (fully) well.
type Fault string

// The faults, as the metrics' reason label gives them.
const (
	OK       Fault = "ok"
	IOError  Fault = "io_error"
	ReadOnly Fault = "read_only"
	Full     Fault = "full"
	Slow     Fault = "slow"
)

// State is the store's durability, for the log, the status page and the
// metrics.
type State struct {
	// Durable: packets are stored on the card before they count as taken.
	Durable bool
	Fault   Fault
	// Words say it as a technician reads it: "buffer not durable: the card
	// answers I/O errors"; "" when well.
	Words string
	// Since is when the state began.
	Since time.Time
	// Volatile is how many packets the volatile buffer holds (lost by a
	// power cut), and VolatilePath where it is; "" before the first fault.
	Volatile     int
	VolatilePath string
	// Took is the last slow commit's duration (Fault Slow).
	Took time.Duration
}

// words says f as a technician reads it.
func words(f Fault, took time.Duration) string {
	switch f {
	case IOError:
		return "buffer not durable: the card answers I/O errors"
	case ReadOnly:
		return "buffer not durable: the card is read-only"
	case Full:
		return "buffer not durable: the card is full"
	case Slow:
		return fmt.Sprintf("buffer slow: the card's writes take %.1f s", took.Seconds())
	}
	return ""
}

// classify says which card fault err is; OK for an error that is not the
// card's.
func classify(err error) Fault {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, syscall.EROFS), strings.Contains(err.Error(), syscall.EROFS.Error()):
		return ReadOnly
	case errors.Is(err, buffer.ErrDiskFull), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT),
		strings.Contains(err.Error(), syscall.ENOSPC.Error()):
		return Full
	case errors.Is(err, buffer.ErrFatal), errors.Is(err, syscall.EIO), strings.Contains(err.Error(), syscall.EIO.Error()):
		return IOError
	}
	return OK
}

// setLocked enters fault f (OK: durable again), logging the change once.
func (s *Store) setLocked(f Fault, took time.Duration, cause error) {
	prev := s.state.Fault
	s.state.Took = took
	s.state.Words = words(f, took)
	s.state.Durable = f == OK || f == Slow
	if prev == f {
		return
	}
	s.state.Fault, s.state.Since = f, time.Now()
	switch {
	case f == OK:
		s.log.Warn("buffer durable again: packets are stored on the card", "path", s.opt.Path, "was", string(prev))
	case f == Slow:
		s.log.Warn(s.state.Words, "path", s.opt.Path, "took_s", took.Seconds())
	default:
		attrs := []any{"path", s.opt.Path, "volatile", s.memPath}
		if cause != nil {
			attrs = append(attrs, "err", cause)
		}
		s.log.Error(s.state.Words+"; live readings go upstream from memory and are lost by a power cut until the card recovers", attrs...)
	}
}

// State returns the store's durability.
func (s *Store) State() State {
	s.mu.Lock()
	st, mem := s.state, s.mem
	s.mu.Unlock()
	if mem != nil {
		st.Volatile = mem.Len()
	}
	return st
}
