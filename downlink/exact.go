package downlink

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

// intRange is the raw range of an integer type; ok is false for others.
func intRange(t profile.Type) (lo, hi decimal, ok bool) {
	switch t {
	case profile.Int16:
		return intDecimal(math.MinInt16, 0, true), intDecimal(math.MaxInt16, 0, true), true
	case profile.Uint16:
		return decimal{}, intDecimal(0, math.MaxUint16, false), true
	case profile.Int32:
		return intDecimal(math.MinInt32, 0, true), intDecimal(math.MaxInt32, 0, true), true
	case profile.Uint32:
		return decimal{}, intDecimal(0, math.MaxUint32, false), true
	case profile.Int64:
		return intDecimal(math.MinInt64, 0, true), intDecimal(math.MaxInt64, 0, true), true
	case profile.Uint64:
		return decimal{}, intDecimal(0, math.MaxUint64, false), true
	}
	return decimal{}, decimal{}, false
}

// Relative error allowed a float register's stored value, against the
// exact raw value, as a power of two: half a unit in the last place of
// the type, doubled for the float64 arithmetic of scale and offset. A
// value that underflows (to zero, or to a subnormal with fewer bits) is
// outside it.
const (
	float32ToleranceBits = 23 // 2^-23
	float64ToleranceBits = 50 // 2^-50
)

// halved returns d / 2^k, exactly: d × 5^k × 10^-k, 5^k in factors of
// at most 5^25 (18 digits).
func halved(d decimal, k int) decimal {
	for k > 0 {
		n := min(k, 25)
		pow := uint64(1)
		for range n {
			pow *= 5
		}
		d, _ = d.mul(intDecimal(0, pow, false))
		d.exp -= n
		k -= n
	}
	return d
}

// onTheWire is f as the bus encodes it for reg, decoded in the order it
// was laid out in: what the register is written.
func onTheWire(reg *profile.Register, f float64) (i int64, u uint64, fl float64, kind packet.Kind, err error) {
	enc := *reg
	if enc.Write != nil {
		w := *enc.Write
		w.Order = nil
		enc.Write = &w
	}
	_, _, data, err := enc.WriteRequest(f)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	i, u, fl, kind = enc.Raw(data)
	return i, u, fl, kind, nil
}

// exact checks a number against the point's rules and its register, on
// the exact value of its text: min, max and step, and then the register's
// own domain. raw = (value − offset) / scale must be, for an integer
// register, a whole number within its type, and for a float register a
// number it stores to its precision. Then f, the value as the bus takes
// it, is encoded as the bus will and decoded: what goes on the wire must
// be raw itself, or the value is refused (beyond 2^53 a float64 does not
// carry every integer). Nothing is rounded, truncated or clamped.
func (p *point) exact(text string, f float64) error {
	v, err := parseDecimal(text)
	if err != nil {
		return err
	}
	r := p.rule
	if r.Min != nil && v.cmp(settingDecimal(*r.Min)) < 0 {
		return fmt.Errorf("%s is below min %v", text, *r.Min)
	}
	if r.Max != nil && v.cmp(settingDecimal(*r.Max)) > 0 {
		return fmt.Errorf("%s is above max %v", text, *r.Max)
	}
	if r.Step > 0 {
		var base decimal
		if r.Min != nil {
			base = settingDecimal(*r.Min)
		}
		if _, whole := v.sub(base).quo(settingDecimal(r.Step)); !whole {
			return fmt.Errorf("%s is not %s plus a whole number of steps of %v", text, base, r.Step)
		}
	}
	reg := p.reg
	x, scale := v.sub(settingDecimal(reg.Offset)), settingDecimal(reg.ScaleOr1())
	lo, hi, isInt := intRange(reg.Type)
	var raw decimal // when isInt
	if isInt {
		var whole bool
		if raw, whole = x.quo(scale); !whole {
			return fmt.Errorf("%w: %s is raw %s, not a whole number: the register holds %s integers (scale %v, offset %v)", profile.ErrNotWritable, text, approx(x, reg.ScaleOr1()), reg.Type, reg.ScaleOr1(), reg.Offset)
		}
		if raw.cmp(lo) < 0 || raw.cmp(hi) > 0 {
			return fmt.Errorf("%w: %s is raw %s, outside %s (%s..%s)", profile.ErrNotWritable, text, raw, reg.Type, lo, hi)
		}
	}
	i, u, fl, kind, err := onTheWire(reg, f)
	if err != nil {
		return err
	}
	switch {
	case isInt:
		if n := intDecimal(i, u, kind != packet.KindUint); n.cmp(raw) != 0 {
			return fmt.Errorf("%w: %s is raw %s, which the bus cannot carry exactly (it would write %s): not written", profile.ErrNotWritable, text, raw, n)
		}
	case reg.Type == profile.Float32 || reg.Type == profile.Float64:
		// |stored − raw| ≤ |raw| × tolerance, times |scale| on both sides:
		// |stored × scale − x| ≤ |x| × tolerance, with no division.
		bits := float64ToleranceBits
		if reg.Type == profile.Float32 {
			bits = float32ToleranceBits
		}
		stored, ok := floatDecimal(fl).mul(scale) // finite: WriteRequest refused the rest
		bound := halved(x.abs(), bits)
		if !ok || cmpAbs(stored.sub(x), bound) > 0 {
			return fmt.Errorf("%w: %s is raw %s, which a %s cannot hold to its precision (it would store %v): not written", profile.ErrNotWritable, text, approx(x, reg.ScaleOr1()), reg.Type, fl)
		}
	default:
		return errors.New("not a number register")
	}
	return nil
}

// approx is x / scale near enough for a message.
func approx(x decimal, scale float64) string {
	f, _ := strconv.ParseFloat(x.String(), 64)
	return strconv.FormatFloat(f/scale, 'g', -1, 64)
}
