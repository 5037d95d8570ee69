package downlink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"fieldlink/internal/jsonkind"
)

// Value is a command's value: a finite JSON number, kept as its text (42.50
// stays 42.50), or a boolean (a coil). The zero Value is no value.
type Value struct {
	text string
	// nonFinite is "NaN", "+Inf" or "-Inf" for a number JSON has no text
	// for (text is then empty): kept so that the refusal can say which.
	nonFinite string
}

// Number returns the value f. NaN and ±Inf have no JSON text: the value
// is then no value (IsZero), which a command refuses naming it.
func Number(f float64) Value {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return Value{nonFinite: strconv.FormatFloat(f, 'g', -1, 64)}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return Value{}
	}
	return Value{text: string(b)}
}

// Bool returns the boolean value b.
func Bool(b bool) Value { return Value{text: strconv.FormatBool(b)} }

// parseValue reads a value from its JSON text.
func parseValue(raw []byte) (Value, error) {
	s := string(raw)
	switch {
	case s == "true" || s == "false":
		return Value{text: s}, nil
	case jsonkind.Of(raw) != "a number":
		return Value{}, fmt.Errorf("%s, want a number or true/false", jsonkind.Of(raw))
	case len(s) > maxValueLength:
		return Value{}, fmt.Errorf("a number of %d characters, at most %d", len(s), maxValueLength)
	case !json.Valid(raw):
		return Value{}, fmt.Errorf("%q is not a JSON number", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return Value{}, fmt.Errorf("%s is out of range", s)
	}
	return Value{text: s}, nil
}

// IsZero reports whether v is no value.
func (v Value) IsZero() bool { return v.text == "" }

// Bool returns v as a boolean; ok is false unless v is one.
func (v Value) Bool() (b, ok bool) {
	switch v.text {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// Float returns v as a number; ok is false unless v is one.
func (v Value) Float() (f float64, ok bool) {
	if _, isBool := v.Bool(); isBool || v.text == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.text, 64)
	return f, err == nil
}

// String returns v's JSON text, "" for no value.
func (v Value) String() string { return v.text }

func (v Value) appendJSON(b []byte) ([]byte, error) {
	if v.text == "" {
		return append(b, "null"...), nil
	}
	return append(b, v.text...), nil
}

// MarshalJSON writes v's text, or null for no value.
func (v Value) MarshalJSON() ([]byte, error) { return v.appendJSON(nil) }

// UnmarshalJSON reads a value; null is no value.
func (v *Value) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*v = Value{}
		return nil
	}
	x, err := parseValue(bytes.TrimSpace(data))
	if err != nil {
		return err
	}
	*v = x
	return nil
}
