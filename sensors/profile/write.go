package profile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"fieldlink/internal/yamlconf"
)

// validateWrite checks a register's write spec: only coils and holding
// registers can be written, by a function that fits them, and never a
// safety register, a bit of a shared word or a string.
func (r *Register) validateWrite(doc *yamlconf.Doc, f string) {
	w := r.Write
	if w == nil {
		return
	}
	switch {
	case r.Safety:
		doc.Errorf(f+".write", "a safety register can never be written: remove write or safety")
	case r.Area != Coil && r.Area != Holding:
		doc.Errorf(f+".write", "a %s is read-only in Modbus: only coils and holding registers can be written", r.Area)
	case r.Bit != nil:
		doc.Errorf(f+".write", "one bit of a shared register cannot be written on its own (the other bits would be overwritten)")
	case r.Type == String:
		doc.Errorf(f+".write", "strings cannot be written")
	}
	ok := w.Function == 0
	switch {
	case r.Area == Coil:
		ok = ok || w.Function == 5 || w.Function == 15
	case r.Words() == 1:
		ok = ok || w.Function == 6 || w.Function == 16
	default:
		ok = ok || w.Function == 16
	}
	if !ok {
		doc.Errorf(f+".write.function", "function %d cannot write a %s %s (valid: 5 or 15 for a coil, 6 or 16 for one register, 16 for more)", w.Function, r.Type, r.Area)
	}
}

// ErrNotWritable is wrapped by the encoding errors of a value the register
// cannot take.
var ErrNotWritable = errors.New("value cannot be written")

// maxExact bounds the integers a float64 holds exactly.
const maxExact = 1 << 53

// WriteRequest turns a value in engineering units into the Modbus write that
// stores it: function, quantity and the request's data bytes, as
// [modbus.Client.Write] takes them. For a holding register raw = (value −
// offset) / scale, rounded half-even to undo the binary fraction (5.1 / 0.1
// is 50.99999999999999), and the words are laid out in the write order.
// A value the register cannot hold exactly is refused, never truncated or
// clamped: not a whole number of scale steps, outside the type's range, or
// not finite. A coil takes 0 or 1 (function 5 writes FF00 or 0000).
func (r *Register) WriteRequest(v float64) (fc byte, qty uint16, data []byte, err error) {
	fc = r.WriteFunction()
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, 0, nil, fmt.Errorf("%w: %v is not a number", ErrNotWritable, v)
	}
	if r.Area == Coil || r.Type == Bool {
		if v != 0 && v != 1 {
			return 0, 0, nil, fmt.Errorf("%w: a %s %s takes true or false (1 or 0), not %v", ErrNotWritable, r.Type, r.Area, v)
		}
		switch {
		case r.Area == Coil && fc == 15:
			return fc, 1, []byte{byte(v)}, nil
		case r.Area == Coil:
			return fc, 1, []byte{0xFF * byte(v), 0}, nil
		}
	}
	order := r.Order
	if r.Write != nil && r.Write.Order != nil {
		order = *r.Write.Order
	}
	var c [8]byte
	n := 2 * r.Type.Words()
	if r.Type == Bool {
		binary.BigEndian.PutUint16(c[:], uint16(v))
	} else if err := r.canonicalRaw(c[:], v); err != nil {
		return 0, 0, nil, err
	}
	data = make([]byte, n)
	wire(data, c[:n], order)
	return fc, uint16(n / 2), data, nil
}

// canonicalRaw writes the raw number for v, big-endian, into c.
func (r *Register) canonicalRaw(c []byte, v float64) error {
	raw := (v - r.Offset) / r.ScaleOr1()
	switch r.Type {
	case Float32:
		if math.Abs(raw) > math.MaxFloat32 {
			return fmt.Errorf("%w: %v is outside float32", ErrNotWritable, v)
		}
		binary.BigEndian.PutUint32(c, math.Float32bits(float32(raw)))
		return nil
	case Float64:
		binary.BigEndian.PutUint64(c, math.Float64bits(raw))
		return nil
	}
	n := math.RoundToEven(raw)
	if math.Abs(raw-n) > 1e-9*math.Max(1, math.Abs(raw)) {
		return fmt.Errorf("%w: %v is not a whole number of the register's steps of %v (raw %s)", ErrNotWritable, v, r.ScaleOr1(), strconv.FormatFloat(raw, 'g', -1, 64))
	}
	lo, hi := r.Type.bounds()
	if n < lo || n > hi {
		return fmt.Errorf("%w: %v is raw %.0f, outside %s (%.0f..%.0f)", ErrNotWritable, v, n, r.Type, lo, hi)
	}
	switch r.Type {
	case Int16, Uint16:
		binary.BigEndian.PutUint16(c, uint16(int64(n)))
	case Int32, Uint32:
		binary.BigEndian.PutUint32(c, uint32(int64(n)))
	case Int64:
		binary.BigEndian.PutUint64(c, uint64(int64(n)))
	case Uint64:
		binary.BigEndian.PutUint64(c, uint64(n))
	}
	return nil
}

// bounds is the raw range of an integer type, cut to what a float64 holds
// exactly.
func (t Type) bounds() (lo, hi float64) {
	switch t {
	case Int16:
		return math.MinInt16, math.MaxInt16
	case Uint16:
		return 0, math.MaxUint16
	case Int32:
		return math.MinInt32, math.MaxInt32
	case Uint32:
		return 0, math.MaxUint32
	case Int64:
		return -maxExact, maxExact
	}
	return 0, maxExact
}
