package lineproto

import (
	"math"
	"strconv"
	"strings"

	"fieldlink/sensors/profile"
)

// falseText pairs the usual true texts with their opposites, for Emit.
var falseText = map[string]string{
	"1": "0", "A": "V", "true": "false", "True": "False", "TRUE": "FALSE",
	"Y": "N", "y": "n", "ON": "OFF", "on": "off",
}

// Emit renders a line from values (measurement name → value, in the units
// of the packet) by the profile's Emit template, the inverse of [Parse], for
// the emulator. It returns "" when the profile has no template.
//
// In the template, {Name} stands for the value of the field called Name:
// the value is turned back into the sensor's raw number ((v − offset) /
// scale) and written with the field's precision, less the decimals the
// scale adds (a field with scale 0.1 and precision 1 is written as a whole
// number). A bool field is written as its first True text when the value is
// not zero, and as that text's usual opposite otherwise ("A"→"V", "1"→"0",
// "true"→"false"; "0" when there is none). A name that is not a field is
// written with the shortest form of its value; a name missing from values
// is written as nothing, the NMEA way of saying "no value". Text outside
// braces is copied as it is. With checksum nmea, "*hh" is appended.
func Emit(l *profile.Line, values map[string]float64) string {
	if l.Emit == "" {
		return ""
	}
	var b strings.Builder
	t := l.Emit
	for {
		open := strings.IndexByte(t, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(t[open:], '}')
		if end < 0 {
			break
		}
		b.WriteString(t[:open])
		name := t[open+1 : open+end]
		if v, ok := values[name]; ok {
			b.WriteString(format(field(l, name), v))
		}
		t = t[open+end+1:]
	}
	b.WriteString(t)
	if l.Checksum == "nmea" {
		return AppendChecksum(b.String())
	}
	return b.String()
}

func field(l *profile.Line, name string) *profile.LineField {
	for i := range l.Fields {
		if l.Fields[i].Name == name {
			return &l.Fields[i]
		}
	}
	return nil
}

// format writes v as the raw text of field f.
func format(f *profile.LineField, v float64) string {
	if f == nil {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	if f.Type == "bool" {
		t := "1"
		if len(f.True) > 0 {
			t = f.True[0]
		}
		if v != 0 {
			return t
		}
		if o, ok := falseText[t]; ok {
			return o
		}
		return "0"
	}
	scale := 1.0
	if f.Scale != nil {
		scale = *f.Scale
	}
	raw := (v - f.Offset) / scale
	if math.IsNaN(raw) || math.IsInf(raw, 0) {
		return ""
	}
	prec := -1
	if f.Precision != nil {
		prec = max(0, *f.Precision-decimals(scale))
	}
	return strconv.FormatFloat(raw, 'f', prec, 64)
}
