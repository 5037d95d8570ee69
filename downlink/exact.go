package downlink

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

// maxExponent bounds the decimal exponent of a value's text (at most
// maxValueLength characters) before it is made exact: far beyond float64,
// and small enough that the exact number is cheap.
const maxExponent = 1000

// ratOf returns the exact number a JSON number's text means.
func ratOf(text string) (*big.Rat, error) {
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		exp, err := strconv.Atoi(strings.TrimPrefix(text[i+1:], "+"))
		if err != nil || exp > maxExponent || exp < -maxExponent {
			return nil, fmt.Errorf("%s is out of range", text)
		}
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return nil, fmt.Errorf("%q is not a number", text)
	}
	return r, nil
}

// ratOfSetting returns the exact number a site file's or a profile's
// setting (scale, offset, min, max, step) means: the shortest decimal of
// its float64, which is the decimal that was written (scale: 0.1 is 1/10,
// not the binary fraction nearest it).
func ratOfSetting(f float64) *big.Rat {
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64)) // a finite float's text
	return r
}

// Exact bounds of the integer types.
var (
	minInt64  = big.NewInt(-1 << 63)
	maxInt64  = big.NewInt(1<<63 - 1)
	maxUint64 = new(big.Int).SetUint64(1<<64 - 1)
)

// intRange is the raw range of an integer type; ok is false for others.
func intRange(t profile.Type) (lo, hi *big.Int, ok bool) {
	switch t {
	case profile.Int16:
		return big.NewInt(-1 << 15), big.NewInt(1<<15 - 1), true
	case profile.Uint16:
		return big.NewInt(0), big.NewInt(1<<16 - 1), true
	case profile.Int32:
		return big.NewInt(-1 << 31), big.NewInt(1<<31 - 1), true
	case profile.Uint32:
		return big.NewInt(0), big.NewInt(1<<32 - 1), true
	case profile.Int64:
		return minInt64, maxInt64, true
	case profile.Uint64:
		return big.NewInt(0), maxUint64, true
	}
	return nil, nil, false
}

// Relative error allowed a float register's stored value, against the
// exact raw value: half a unit in the last place of the type, doubled
// for the float64 arithmetic of scale and offset. A value that underflows
// (to zero, or to a subnormal with fewer bits) is outside it.
var (
	float32Tolerance = big.NewRat(1, 1<<23)
	float64Tolerance = big.NewRat(1, 1<<50)
)

// exact checks a number against the point's rules and its register, on
// the exact value of its text: min, max and step, and then the register's
// own domain. raw = (value − offset) / scale must be, for an integer
// register, a whole number within its type, and for a float register a
// number it stores to its precision. Then f, the value as the bus takes
// it, is encoded as the bus will and decoded: what goes on the wire must
// be raw itself, or the value is refused (beyond 2^53 a float64 does not
// carry every integer). Nothing is rounded, truncated or clamped.
func (p *point) exact(text string, f float64) error {
	v, err := ratOf(text)
	if err != nil {
		return err
	}
	r := p.rule
	if r.Min != nil && v.Cmp(ratOfSetting(*r.Min)) < 0 {
		return fmt.Errorf("%s is below min %v", text, *r.Min)
	}
	if r.Max != nil && v.Cmp(ratOfSetting(*r.Max)) > 0 {
		return fmt.Errorf("%s is above max %v", text, *r.Max)
	}
	if r.Step > 0 {
		base := new(big.Rat)
		if r.Min != nil {
			base = ratOfSetting(*r.Min)
		}
		n := new(big.Rat).Sub(v, base)
		if !n.Quo(n, ratOfSetting(r.Step)).IsInt() {
			return fmt.Errorf("%s is not %v plus a whole number of steps of %v", text, base.RatString(), r.Step)
		}
	}
	reg := p.reg
	raw := new(big.Rat).Sub(v, ratOfSetting(reg.Offset))
	raw.Quo(raw, ratOfSetting(reg.ScaleOr1()))
	lo, hi, isInt := intRange(reg.Type)
	if isInt {
		if !raw.IsInt() {
			return fmt.Errorf("%w: %s is raw %s, not a whole number: the register holds %s integers (scale %v, offset %v)", profile.ErrNotWritable, text, ratText(raw), reg.Type, reg.ScaleOr1(), reg.Offset)
		}
		if n := raw.Num(); n.Cmp(lo) < 0 || n.Cmp(hi) > 0 {
			return fmt.Errorf("%w: %s is raw %s, outside %s (%s..%s)", profile.ErrNotWritable, text, n, reg.Type, lo, hi)
		}
	}
	// As the bus encodes it, decoded in the order it was laid out in.
	enc := *reg
	if enc.Write != nil {
		w := *enc.Write
		w.Order = nil
		enc.Write = &w
	}
	_, _, data, err := enc.WriteRequest(f)
	if err != nil {
		return err
	}
	i, u, fl, kind := enc.Raw(data)
	switch {
	case isInt:
		var n *big.Int
		if kind == packet.KindUint {
			n = new(big.Int).SetUint64(u)
		} else {
			n = big.NewInt(i)
		}
		if n.Cmp(raw.Num()) != 0 {
			return fmt.Errorf("%w: %s is raw %s, which the bus cannot carry exactly (it would write %s): not written", profile.ErrNotWritable, text, raw.Num(), n)
		}
	case reg.Type == profile.Float32 || reg.Type == profile.Float64:
		tol := float64Tolerance
		if reg.Type == profile.Float32 {
			tol = float32Tolerance
		}
		stored := new(big.Rat).SetFloat64(fl) // finite: WriteRequest refused the rest
		diff := new(big.Rat).Sub(stored, raw)
		bound := new(big.Rat).Mul(new(big.Rat).Abs(raw), tol)
		if diff.Abs(diff).Cmp(bound) > 0 {
			return fmt.Errorf("%w: %s is raw %s, which a %s cannot hold to its precision (it would store %v): not written", profile.ErrNotWritable, text, ratText(raw), reg.Type, fl)
		}
	default:
		return errors.New("not a number register")
	}
	return nil
}

// ratText is r as a short decimal, for a message.
func ratText(r *big.Rat) string {
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}
