package lineproto

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

// ErrNoMatch is the error wrapped when a line passes the profile's Match
// filter but does not match its regex.
var ErrNoMatch = errors.New("lineproto: line does not match the profile's regex")

// FieldError is a value that could not be read from a line: which field,
// the offending text, and why.
type FieldError struct {
	Field string // the profile field's name, e.g. "WindSpeed"
	Text  string // the text taken from the line for it
	Err   error  // the underlying problem, e.g. from strconv
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("lineproto: field %s: bad value %q: %v", e.Field, clip(e.Text), e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Parse turns one line from a serial ASCII sensor into packet fields, in
// the order of the profile's fields, and names the fields whose value
// crossed an alarm threshold.
//
// Trailing CR and LF are ignored. A line that does not contain l.Match is
// not for this profile: Parse returns ok == false and a nil error. Every
// other line either parses (ok == true) or returns an error that names the
// field and quotes the bad text ([*FieldError]), or wraps [ErrChecksum] or
// [ErrNoMatch]. Number and bool fields whose text is empty are left out
// (see the package documentation).
//
// Numbers are value = text·scale + offset. A field's precision is the
// profile's, or else the digits after the point in the text plus those of
// the scale (so "002.74" keeps two decimals and "274" with scale 0.01 gets
// two). Non-finite numbers ("NaN", "Inf") are errors. A bool is true when
// its text is one of the field's True texts; its alarm, if any, sees 1 or 0.
//
// l must come from a validated profile ([profile.Parse] or [profile.Load]):
// its regex is compiled there.
func Parse(l *profile.Line, line string) (fields []packet.Field, alarmed []string, ok bool, err error) {
	line = strings.TrimRight(line, "\r\n")
	if l.Match != "" && !strings.Contains(line, l.Match) {
		return nil, nil, false, nil
	}
	if l.Checksum == "nmea" {
		if line, err = VerifyChecksum(line); err != nil {
			return nil, nil, false, err
		}
	}
	var groups []string // regex submatches
	var parts []string  // delimiter fields
	if re := l.Re(); re != nil {
		idx := re.FindStringSubmatchIndex(line)
		if idx == nil {
			return nil, nil, false, fmt.Errorf("%w: %q", ErrNoMatch, clip(line))
		}
		groups = make([]string, len(idx)/2)
		for i := range groups {
			if idx[2*i] >= 0 {
				groups[i] = line[idx[2*i]:idx[2*i+1]]
			}
		}
	} else if l.Delimiter != "" {
		parts = strings.Split(line, l.Delimiter)
	} else {
		return nil, nil, false, errors.New("lineproto: profile line has neither regex nor delimiter (not validated?)")
	}

	fields = make([]packet.Field, 0, len(l.Fields))
	for i := range l.Fields {
		f := &l.Fields[i]
		var text string
		switch {
		case groups != nil:
			g := l.Re().SubexpIndex(f.Group)
			if g < 0 {
				return nil, nil, false, fmt.Errorf("lineproto: field %s: regex has no group %q", f.Name, f.Group)
			}
			text = groups[g]
		case f.Index == nil:
			return nil, nil, false, fmt.Errorf("lineproto: field %s: no index", f.Name)
		case *f.Index >= len(parts):
			return nil, nil, false, fmt.Errorf("lineproto: field %s: index %d, but the line has %d fields: %q",
				f.Name, *f.Index, len(parts), clip(line))
		default:
			text = strings.TrimSpace(parts[*f.Index])
		}

		v, alarm, present, err := value(f, text)
		if err != nil {
			return nil, nil, false, err
		}
		if !present {
			continue
		}
		fields = append(fields, packet.Field{Name: f.Name, Value: v})
		if alarm {
			alarmed = append(alarmed, f.Name)
		}
	}
	return fields, alarmed, true, nil
}

// value converts one field's text. present is false for an empty number or
// bool.
func value(f *profile.LineField, text string) (v packet.Value, alarm, present bool, err error) {
	switch f.Type {
	case "string":
		return packet.String(text), false, true, nil
	case "bool":
		if text == "" {
			return v, false, false, nil
		}
		b := slices.Contains(f.True, text)
		n := 0.0
		if b {
			n = 1
		}
		return packet.Bool(b), f.Alarm.Fires(n), true, nil
	}
	if text == "" {
		return v, false, false, nil
	}
	if i := strings.IndexFunc(text, notDecimal); i >= 0 {
		return v, false, false, &FieldError{Field: f.Name, Text: text, Err: fmt.Errorf("unexpected %q in a decimal number", text[i:i+1])}
	}
	x, err := strconv.ParseFloat(text, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			err = ne.Err
		}
		return v, false, false, &FieldError{Field: f.Name, Text: text, Err: err}
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return v, false, false, &FieldError{Field: f.Name, Text: text, Err: errors.New("not a finite number")}
	}
	scale := 1.0
	if f.Scale != nil {
		scale = *f.Scale
	}
	x = x*scale + f.Offset
	if math.IsInf(x, 0) {
		return v, false, false, &FieldError{Field: f.Name, Text: text, Err: errors.New("out of range after scaling")}
	}
	return packet.Float(x, precision(f, text)), f.Alarm.Fires(x), true, nil
}

// notDecimal reports whether c cannot appear in a decimal number. It keeps
// strconv's Go-syntax extras (hex floats, underscores, "Inf") out of what a
// sensor line may contain.
func notDecimal(c rune) bool {
	return !('0' <= c && c <= '9' || c == '.' || c == '+' || c == '-' || c == 'e' || c == 'E')
}

// precision is the field's configured precision, or the decimals of the
// text plus those of the scale, and at least those of the offset.
func precision(f *profile.LineField, text string) int {
	if f.Precision != nil {
		return *f.Precision
	}
	p := 0
	if i := strings.IndexByte(text, '.'); i >= 0 {
		// Count digits only, so "1.5e3" does not count "e3".
		for _, c := range text[i+1:] {
			if c < '0' || c > '9' {
				break
			}
			p++
		}
	}
	if f.Scale != nil {
		p += decimals(*f.Scale)
	}
	return min(max(p, decimals(f.Offset)), 10)
}

// decimals counts the digits after the point in v's shortest form.
func decimals(v float64) int {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return len(s) - i - 1
	}
	return 0
}
