package packet

import (
	"math"
	"strconv"
)

// Kind is the type of a [Value].
type Kind uint8

// The kinds of a [Value]. KindString is zero, so that the zero Value is the
// empty string: a field that was never set is written as "" rather than as a
// misleading 0.
const (
	KindString Kind = iota
	KindFloat
	KindInt
	KindUint
	KindBool
)

var kindNames = [...]string{"String", "Float", "Int", "Uint", "Bool"}

// String returns the kind's name, e.g. "Float".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one measurement: a float with its precision, an integer, a boolean
// or a string. Build one with [Float], [Int], [Uint], [Bool] or [String]; the
// zero Value is String("").
//
// A Value is small (32 bytes on 64-bit targets, 20 on 32-bit ARM) and is
// passed by value.
type Value struct {
	kind Kind
	prec int8   // KindFloat: digits after the point; -1 = shortest
	num  uint64 // float64 bits, int64, uint64 or 0/1, by kind
	str  string // KindString
}

// Float returns a float Value written with prec digits after the decimal
// point, or, when prec is negative, in the shortest form that reads back as
// the same float64 ("25.3", not "25.300000000000001"). A register scaled by
// 0.1 wants prec 1, so that 25 is written "25.0" as the device shows it.
//
// prec above 127 is taken as 127.
func Float(v float64, prec int) Value {
	switch {
	case prec < 0:
		prec = -1
	case prec > math.MaxInt8:
		prec = math.MaxInt8
	}
	return Value{kind: KindFloat, prec: int8(prec), num: math.Float64bits(v)}
}

// Int returns a signed integer Value.
func Int(v int64) Value { return Value{kind: KindInt, num: uint64(v)} }

// Uint returns an unsigned integer Value, for counters and raw registers.
func Uint(v uint64) Value { return Value{kind: KindUint, num: v} }

// Bool returns a boolean Value, for coils and discrete inputs. It is written
// "True"/"False" in [Strings] mode, as the platform expects, and true/false in
// [Numbers] mode.
func Bool(v bool) Value {
	var n uint64
	if v {
		n = 1
	}
	return Value{kind: KindBool, num: n}
}

// String returns a string Value, for status words and enumerations.
func String(v string) Value { return Value{kind: KindString, str: v} }

// Kind returns the kind of v.
func (v Value) Kind() Kind { return v.kind }

// Float64 returns v as a number, for threshold (alarm) checks: a float as it
// is, an integer converted, a boolean as 1 or 0, so that a threshold "≥ 1"
// fires on a tripped contact. ok is false for a string, which has no numeric
// view. A NaN float is returned as NaN: no comparison with it holds, so it
// never raises an alarm on its own.
func (v Value) Float64() (f float64, ok bool) {
	switch v.kind {
	case KindFloat:
		return math.Float64frombits(v.num), true
	case KindInt:
		return float64(int64(v.num)), true
	case KindUint, KindBool:
		return float64(v.num), true
	}
	return 0, false
}

// AppendText appends the text form of v, the one [Strings] mode puts
// between quotes (before JSON escaping): "25.3", "-4", "True", "NaN", or the
// string itself. It implements [encoding.TextAppender]; the error is always
// nil.
func (v Value) AppendText(b []byte) ([]byte, error) {
	return v.appendText(b), nil
}

// String returns the text form of v, as [Value.AppendText] appends it.
func (v Value) String() string {
	return string(v.appendText(nil))
}

// appendText appends the text form of v without quotes or escaping.
func (v Value) appendText(dst []byte) []byte {
	switch v.kind {
	case KindFloat:
		return appendFloat(dst, math.Float64frombits(v.num), int(v.prec))
	case KindInt:
		return strconv.AppendInt(dst, int64(v.num), 10)
	case KindUint:
		return strconv.AppendUint(dst, v.num, 10)
	case KindBool:
		if v.num != 0 {
			return append(dst, "True"...)
		}
		return append(dst, "False"...)
	}
	return append(dst, v.str...)
}

// appendJSON appends v as a JSON value in the given value style.
func (v Value) appendJSON(dst []byte, style ValueStyle) []byte {
	if style == Numbers {
		switch v.kind {
		case KindFloat:
			f := math.Float64frombits(v.num)
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return append(dst, "null"...)
			}
			return appendFloat(dst, f, int(v.prec))
		case KindInt, KindUint:
			return v.appendText(dst)
		case KindBool:
			if v.num != 0 {
				return append(dst, "true"...)
			}
			return append(dst, "false"...)
		}
		return appendString(dst, v.str)
	}
	if v.kind == KindString {
		return appendString(dst, v.str)
	}
	// Numbers and booleans have only ASCII digits, letters, '.', '+' and
	// '-' in their text form: nothing to escape.
	dst = append(dst, '"')
	dst = v.appendText(dst)
	return append(dst, '"')
}

// appendFloat appends f in 'f' format with prec decimals (-1 = shortest),
// writing a value that rounds to zero without its minus sign: "-0" and
// "-0.00" would read as noise on a dashboard.
func appendFloat(dst []byte, f float64, prec int) []byte {
	n := len(dst)
	dst = strconv.AppendFloat(dst, f, 'f', prec, 64)
	if dst[n] != '-' {
		return dst
	}
	for _, c := range dst[n+1:] {
		if c != '0' && c != '.' {
			return dst
		}
	}
	copy(dst[n:], dst[n+1:])
	return dst[:len(dst)-1]
}
