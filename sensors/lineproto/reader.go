package lineproto

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine is the longest line a [Reader] accepts when none is given:
// ample for NMEA 0183 (82 characters) and for the comma-separated output
// of weather stations.
const DefaultMaxLine = 512

// ErrLineTooLong is the error wrapped when a line exceeds the Reader's
// maximum length.
var ErrLineTooLong = errors.New("lineproto: line too long")

// Reader splits the bytes of a serial ASCII sensor into lines. A line ends
// with LF; a CR before it is removed, and so is a trailing CR of the last
// line at end of input. Memory stays bounded however the sensor misbehaves:
// at most about 2·max bytes are buffered.
//
// A Reader is not safe for use by several goroutines at once.
type Reader struct {
	br  *bufio.Reader
	max int
	// partial holds the start of a line read before an error of the
	// underlying reader (a serial read timeout, say), so that the line is
	// not lost when the caller reads on. Never longer than max+1.
	partial []byte
	// skip is set after a too-long line has been reported: the rest of
	// it, up to the next LF, is discarded by the following calls.
	skip bool
}

// NewReader returns a Reader of lines of at most max bytes (not counting
// the line end); max ≤ 0 means [DefaultMaxLine].
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &Reader{br: bufio.NewReaderSize(r, max+2), max: max}
}

// ReadLine returns the next line without its line end.
//
// When more than max bytes arrive without a LF, ReadLine returns at once an
// error wrapping [ErrLineTooLong] that quotes the start of the line. The
// following calls discard the rest of that line, returning the same kind of
// error again for every further max bytes or so without a LF (so that a
// sensor that never ends its line cannot keep the caller inside ReadLine
// for ever), and then go on with the next line.
//
// At end of input, a last line without LF is returned as a line, and the
// call after it returns io.EOF. Other errors of the underlying reader are
// returned as they are; the part of a line read before such an error is
// kept, and the line is completed by the next calls. (bufio's rule applies
// to a reader that keeps returning no bytes and no error: after 100 such
// reads, the error is io.ErrNoProgress.)
func (r *Reader) ReadLine() (string, error) {
	for {
		b, err := r.br.ReadSlice('\n')
		if r.skip {
			switch {
			case err == nil:
				r.skip = false // the end of the long line: go on with the next
				continue
			case errors.Is(err, bufio.ErrBufferFull):
				return "", fmt.Errorf("%w: still no line end after %d more bytes", ErrLineTooLong, len(b))
			}
			return "", err
		}
		switch {
		case err == nil:
			b = b[:len(b)-1] // LF
		case errors.Is(err, bufio.ErrBufferFull):
			r.skip = true
			line := append(r.partial, b...)
			r.partial = r.partial[:0]
			return "", r.tooLong(line)
		case errors.Is(err, io.EOF) && len(r.partial)+len(b) > 0:
			// Last line without LF: return it; the next call gets EOF.
		default:
			if len(b) > 0 {
				if len(r.partial)+len(b) > r.max+1 {
					r.skip = true
					line := append(r.partial, b...)
					r.partial = r.partial[:0]
					return "", r.tooLong(line)
				}
				r.partial = append(r.partial, b...)
			}
			return "", err
		}
		if len(r.partial) > 0 {
			b = append(r.partial, b...)
			r.partial = r.partial[:0]
		}
		b = bytes.TrimSuffix(b, []byte{'\r'})
		// The buffer can be bigger than max+2 (NewReaderSize reuses a
		// large enough bufio.Reader), and a kept partial line adds to it,
		// so check the length itself.
		if len(b) > r.max {
			return "", r.tooLong(b)
		}
		return string(b), nil
	}
}

func (r *Reader) tooLong(b []byte) error {
	return fmt.Errorf("%w: more than %d bytes without a line end, starting %q", ErrLineTooLong, r.max, clip(string(b)))
}
