package downlink

import (
	"fmt"
	"strconv"
	"strings"
)

// decimal is an exact number, digits × 10^exp, negative if neg: digits
// are 0..9, most significant first, with no leading or trailing zero, and
// zero has none. A command's value and every number it meets on the way
// to the register (a site file's min, max and step, the register's scale
// and offset, the float it stores) are finite decimals, so the checks on
// them are exact with no more than this: add, compare, multiply by a
// number of up to 18 digits and divide by one.
type decimal struct {
	neg    bool
	digits []byte
	exp    int
}

// maxExponent bounds the decimal exponent of a value's text (at most
// maxValueLength characters): far beyond float64, and small enough that
// the exact number stays short (a few thousand digits at worst).
const maxExponent = 1000

// parseDecimal returns the exact number a JSON number's text means.
func parseDecimal(text string) (decimal, error) {
	var d decimal
	s := text
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp, err := strconv.Atoi(s[i+1:])
		if err != nil || exp > maxExponent || exp < -maxExponent {
			return decimal{}, fmt.Errorf("%s is out of range", text)
		}
		d.exp, s = exp, s[:i]
	}
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		d.neg, s = true, rest
	}
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" {
		return decimal{}, fmt.Errorf("%q is not a number", text)
	}
	d.digits = make([]byte, 0, len(whole)+len(frac))
	for _, c := range whole + frac {
		if c < '0' || c > '9' {
			return decimal{}, fmt.Errorf("%q is not a number", text)
		}
		d.digits = append(d.digits, byte(c-'0'))
	}
	d.exp -= len(frac)
	return d.norm(), nil
}

// settingDecimal returns the number a site file's or a profile's setting
// (scale, offset, min, max, step) means: the shortest decimal of its
// float64, which is the decimal that was written (scale 0.1 is 1/10, not
// the binary fraction nearest it), at most 17 digits.
func settingDecimal(f float64) decimal {
	d, _ := parseDecimal(strconv.FormatFloat(f, 'g', -1, 64)) // a finite float's text
	return d
}

// floatDecimal returns the exact value of a finite float64: a binary
// fraction, which 767 significant digits always write out in full.
func floatDecimal(f float64) decimal {
	d, _ := parseDecimal(strconv.FormatFloat(f, 'e', 767, 64))
	return d
}

// intDecimal returns n, or u when signed is false.
func intDecimal(n int64, u uint64, signed bool) decimal {
	if signed {
		d, _ := parseDecimal(strconv.FormatInt(n, 10))
		return d
	}
	d, _ := parseDecimal(strconv.FormatUint(u, 10))
	return d
}

// norm drops leading and trailing zeros; zero is positive.
func (d decimal) norm() decimal {
	i := 0
	for i < len(d.digits) && d.digits[i] == 0 {
		i++
	}
	j := len(d.digits)
	for j > i && d.digits[j-1] == 0 {
		j--
	}
	if i == j {
		return decimal{}
	}
	d.exp += len(d.digits) - j
	d.digits = d.digits[i:j]
	return d
}

func (d decimal) isZero() bool { return len(d.digits) == 0 }

func (d decimal) abs() decimal { d.neg = false; return d }

func (d decimal) negate() decimal {
	if !d.isZero() {
		d.neg = !d.neg
	}
	return d
}

// cmpAbs compares |a| and |b|: -1, 0 or +1.
func cmpAbs(a, b decimal) int {
	switch {
	case a.isZero() || b.isZero():
		return cmpInt(len(a.digits), len(b.digits)) // zero is the smaller; two zeros are equal
	case len(a.digits)+a.exp != len(b.digits)+b.exp: // the leading digits' places
		return cmpInt(len(a.digits)+a.exp, len(b.digits)+b.exp)
	}
	// Same place: digit by digit; with no trailing zeros, the longer of
	// two that agree is the larger.
	for i := 0; i < len(a.digits) && i < len(b.digits); i++ {
		if a.digits[i] != b.digits[i] {
			return cmpInt(int(a.digits[i]), int(b.digits[i]))
		}
	}
	return cmpInt(len(a.digits), len(b.digits))
}

// cmp compares a and b: -1, 0 or +1.
func (a decimal) cmp(b decimal) int {
	if sa, sb := a.sign(), b.sign(); sa != sb {
		return cmpInt(sa, sb)
	}
	if a.neg {
		return -cmpAbs(a, b)
	}
	return cmpAbs(a, b)
}

func (d decimal) sign() int {
	switch {
	case d.isZero():
		return 0
	case d.neg:
		return -1
	}
	return 1
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sub returns a − b.
func (a decimal) sub(b decimal) decimal { return a.add(b.negate()) }

// add returns a + b, both written out down to the lower of their last
// places.
func (a decimal) add(b decimal) decimal {
	switch {
	case a.isZero():
		return b
	case b.isZero():
		return a
	}
	if a.neg != b.neg && cmpAbs(a, b) < 0 {
		a, b = b, a // the larger magnitude first: it gives the sign
	}
	exp := min(a.exp, b.exp)
	x, y := a.aligned(exp), b.aligned(exp)
	n := max(len(x), len(y)) + 1
	out := make([]byte, n)
	carry := 0
	for i := 1; i <= n; i++ { // from the last place up
		s := carry + digitAt(x, len(x)-i)
		if a.neg == b.neg {
			s += digitAt(y, len(y)-i)
		} else {
			s -= digitAt(y, len(y)-i)
		}
		carry = 0
		switch {
		case s >= 10:
			s, carry = s-10, 1
		case s < 0:
			s, carry = s+10, -1
		}
		out[n-i] = byte(s)
	}
	return decimal{neg: a.neg, digits: out, exp: exp}.norm()
}

// aligned returns d's digits written out to the place 10^exp (exp ≤ d.exp).
func (d decimal) aligned(exp int) []byte {
	out := make([]byte, len(d.digits)+d.exp-exp)
	copy(out, d.digits)
	return out
}

func digitAt(d []byte, i int) int {
	if i < 0 {
		return 0
	}
	return int(d[i])
}

// small returns |d|'s digits as an integer, if it has at most 18 (below
// 10^18, which leaves a uint64 room to multiply by ten and carry).
func (d decimal) small() (uint64, bool) {
	if len(d.digits) > 18 {
		return 0, false
	}
	var n uint64
	for _, c := range d.digits {
		n = n*10 + uint64(c)
	}
	return n, true
}

// mul returns a × b, b of at most 18 digits (a setting, or a power of 5);
// ok is false for a longer b.
func (a decimal) mul(b decimal) (p decimal, ok bool) {
	m, ok := b.small()
	if !ok {
		return decimal{}, false
	}
	if a.isZero() || m == 0 {
		return decimal{}, true
	}
	// Each step's sum is below 10m + m < 2^64 for m < 10^18.
	out := make([]byte, len(a.digits)+19)
	var carry uint64
	i := len(out)
	for k := len(a.digits) - 1; k >= 0 || carry > 0; k-- {
		s := carry
		if k >= 0 {
			s += uint64(a.digits[k]) * m
		}
		i--
		out[i], carry = byte(s%10), s/10
	}
	return decimal{neg: a.neg != b.neg, digits: out, exp: a.exp + b.exp}.norm(), true
}

// quo returns a / b if it is a whole number (ok false otherwise, or for a
// b of more than 18 digits, or zero). a/b = (A/B)·10^(a.exp−b.exp) for
// their digits A and B: with A ending in a non-zero digit, it is whole
// only if a.exp ≥ b.exp and B divides A·10^(a.exp−b.exp), which long
// division by B finds, the remainder staying below B.
func (a decimal) quo(b decimal) (q decimal, ok bool) {
	m, ok := b.small()
	if !ok || m == 0 {
		return decimal{}, false
	}
	if a.isZero() {
		return decimal{}, true
	}
	shift := a.exp - b.exp
	if shift < 0 {
		return decimal{}, false
	}
	out := make([]byte, len(a.digits)+shift)
	var r uint64
	for i := range out {
		r *= 10
		if i < len(a.digits) {
			r += uint64(a.digits[i])
		}
		out[i], r = byte(r/m), r%m
	}
	if r != 0 {
		return decimal{}, false
	}
	return decimal{neg: a.neg != b.neg, digits: out}.norm(), true
}

// String writes d as a plain decimal, for a message: 1000000000000, 0.5.
func (d decimal) String() string {
	if d.isZero() {
		return "0"
	}
	var b strings.Builder
	if d.neg {
		b.WriteByte('-')
	}
	digits := make([]byte, len(d.digits))
	for i, c := range d.digits {
		digits[i] = '0' + c
	}
	switch point := len(digits) + d.exp; {
	case d.exp >= 0:
		b.Write(digits)
		b.WriteString(strings.Repeat("0", d.exp))
	case point > 0:
		b.Write(digits[:point])
		b.WriteByte('.')
		b.Write(digits[point:])
	default:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.Write(digits)
	}
	return b.String()
}
