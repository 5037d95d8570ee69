package profile

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"

	"fieldlink/packet"
)

// canonical reorders the wire bytes of a multi-register value into
// big-endian (ABCD…) order, in place in dst. CDAB reverses the word order,
// BADC swaps the two bytes of each word, DCBA does both.
func canonical(dst, wire []byte, o Order) {
	n := len(wire)
	for w := 0; w < n/2; w++ {
		src := w
		if o == CDAB || o == DCBA {
			src = n/2 - 1 - w
		}
		hi, lo := wire[2*src], wire[2*src+1]
		if o == BADC || o == DCBA {
			hi, lo = lo, hi
		}
		dst[2*w], dst[2*w+1] = hi, lo
	}
}

// wire is the inverse of canonical, which is canonical itself: reversing
// the words and swapping the bytes of each word each undo themselves.
func wire(dst, canon []byte, o Order) { canonical(dst, canon, o) }

// Raw decodes the register from its wire bytes (2·Words() bytes, as read)
// into the raw number before scale and offset. ok is false for bool and
// string registers.
func (r *Register) Raw(b []byte) (i int64, u uint64, f float64, kind packet.Kind) {
	var c [8]byte
	canonical(c[:len(b)], b, r.Order)
	switch r.Type {
	case Int16:
		return int64(int16(binary.BigEndian.Uint16(c[:]))), 0, 0, packet.KindInt
	case Uint16:
		return 0, uint64(binary.BigEndian.Uint16(c[:])), 0, packet.KindUint
	case Int32:
		return int64(int32(binary.BigEndian.Uint32(c[:]))), 0, 0, packet.KindInt
	case Uint32:
		return 0, uint64(binary.BigEndian.Uint32(c[:])), 0, packet.KindUint
	case Int64:
		return int64(binary.BigEndian.Uint64(c[:])), 0, 0, packet.KindInt
	case Uint64:
		return 0, binary.BigEndian.Uint64(c[:]), 0, packet.KindUint
	case Float32:
		return 0, 0, float64(math.Float32frombits(binary.BigEndian.Uint32(c[:]))), packet.KindFloat
	case Float64:
		return 0, 0, math.Float64frombits(binary.BigEndian.Uint64(c[:])), packet.KindFloat
	}
	return 0, 0, 0, packet.KindString
}

// Decode turns the wire bytes of a holding or input register (exactly
// 2·Words() bytes) into the measurement, scaled and ready for a packet.
//
// Integers stay exact when no scale or offset applies; otherwise the value
// is a float rounded, in the packet, to Precision digits (by default as many
// digits as the scale and offset have, so a 0.1 scale shows one decimal).
func (r *Register) Decode(b []byte) packet.Value {
	switch r.Type {
	case Bool:
		w := binary.BigEndian.Uint16(b)
		if r.Order == BADC || r.Order == DCBA {
			w = w>>8 | w<<8
		}
		if r.Bit != nil {
			return packet.Bool(w&(1<<*r.Bit) != 0)
		}
		return packet.Bool(w != 0)
	case String:
		s := make([]byte, len(b))
		canonicalString(s, b, r.Order)
		return packet.String(strings.TrimRight(string(s), "\x00 "))
	}
	i, u, f, kind := r.Raw(b)
	plain := r.Scale == nil && r.Offset == 0
	if plain && r.Precision == nil {
		switch kind {
		case packet.KindInt:
			return packet.Int(i)
		case packet.KindUint:
			return packet.Uint(u)
		}
		if r.Type == Float32 {
			// Show the float32's own shortest form (25.3, not 25.299999237060547).
			f, _ = strconv.ParseFloat(strconv.FormatFloat(f, 'g', -1, 32), 64)
		}
	}
	switch kind {
	case packet.KindInt:
		f = float64(i)
	case packet.KindUint:
		f = float64(u)
	}
	return packet.Float(f*r.ScaleOr1()+r.Offset, r.precision())
}

// canonicalString orders string bytes: BADC and DCBA swap each register's
// two bytes; word order of a string is always first register first.
func canonicalString(dst, b []byte, o Order) {
	copy(dst, b)
	if o == BADC || o == DCBA {
		for i := 0; i+1 < len(dst); i += 2 {
			dst[i], dst[i+1] = dst[i+1], dst[i]
		}
	}
}

func (r *Register) precision() int {
	if r.Precision != nil {
		return *r.Precision
	}
	if r.Scale == nil && r.Offset == 0 {
		return -1
	}
	return max(decimals(r.ScaleOr1()), decimals(r.Offset))
}

// decimals counts the digits after the point in v's shortest form.
func decimals(v float64) int {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return len(s) - i - 1
	}
	return 0
}

// Encode writes a measurement into the register's wire bytes (2·Words()
// bytes): the inverse of Decode, used by the emulator. Numbers are
// unscaled, rounded and clamped to the type's range.
func (r *Register) Encode(dst []byte, v float64) {
	switch r.Type {
	case Bool:
		var w uint16
		if v != 0 {
			w = 1
			if r.Bit != nil {
				w = 1 << *r.Bit
			}
		}
		if r.Order == BADC || r.Order == DCBA {
			w = w>>8 | w<<8
		}
		binary.BigEndian.PutUint16(dst, w)
		return
	case String:
		r.EncodeString(dst, strconv.FormatFloat(v, 'f', -1, 64))
		return
	}
	raw := (v - r.Offset) / r.ScaleOr1()
	var c [8]byte
	switch r.Type {
	case Int16:
		binary.BigEndian.PutUint16(c[:], uint16(int16(clamp(raw, math.MinInt16, math.MaxInt16))))
	case Uint16:
		binary.BigEndian.PutUint16(c[:], uint16(clamp(raw, 0, math.MaxUint16)))
	case Int32:
		binary.BigEndian.PutUint32(c[:], uint32(int32(clamp(raw, math.MinInt32, math.MaxInt32))))
	case Uint32:
		binary.BigEndian.PutUint32(c[:], uint32(clamp(raw, 0, math.MaxUint32)))
	case Int64:
		binary.BigEndian.PutUint64(c[:], uint64(int64(clamp(raw, math.MinInt64, 1<<63-1024))))
	case Uint64:
		binary.BigEndian.PutUint64(c[:], uint64(clamp(raw, 0, 1<<64-2048)))
	case Float32:
		binary.BigEndian.PutUint32(c[:], math.Float32bits(float32(raw)))
	case Float64:
		binary.BigEndian.PutUint64(c[:], math.Float64bits(raw))
	}
	wire(dst[:2*r.Type.Words()], c[:2*r.Type.Words()], r.Order)
}

// EncodeString writes s, NUL-padded, into the register's wire bytes.
func (r *Register) EncodeString(dst []byte, s string) {
	n := 2 * r.Length
	clear(dst[:n])
	copy(dst[:n], s)
	canonicalString(dst[:n], dst[:n], r.Order)
}

func clamp(v, lo, hi float64) float64 {
	v = math.Round(v)
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// Alarmed reports whether a decoded value is past the register's alarm
// thresholds.
func (r *Register) Alarmed(v packet.Value) bool {
	if r.Alarm == nil {
		return false
	}
	f, ok := v.Float64()
	return ok && r.Alarm.Fires(f)
}
