package sparkplug

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error of [Unmarshal]: the bytes are not
// a well-formed protocol buffers message of the kind expected.
var ErrMalformed = errors.New("sparkplug: malformed payload")

// maxDepth bounds the nesting of property sets that Unmarshal follows.
const maxDepth = 32

// Unmarshal decodes a Payload. Fields this package does not model (data
// sets, templates, metadata, extensions, unknown fields) are skipped; a
// field whose wire type is not the .proto's is skipped as unknown, as
// protocol buffers libraries do. For a field that appears more than once
// the last one wins; repeated and message fields are merged.
func Unmarshal(b []byte) (*Payload, error) {
	p := &Payload{}
	err := walk(b, func(field, wire int, v uint64, body []byte) error {
		switch {
		case field == 1 && wire == wireVarint:
			p.Timestamp = v
		case field == 2 && wire == wireBytes:
			var m Metric
			if err := m.unmarshal(body); err != nil {
				return err
			}
			p.Metrics = append(p.Metrics, m)
		case field == 3 && wire == wireVarint:
			p.Seq, p.HasSeq = v, true
		case field == 4 && wire == wireBytes:
			p.UUID = string(body)
		case field == 5 && wire == wireBytes:
			p.Body = append([]byte(nil), body...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (m *Metric) unmarshal(b []byte) error {
	return walk(b, func(field, wire int, v uint64, body []byte) error {
		switch {
		case field == 1 && wire == wireBytes:
			m.Name = string(body)
		case field == 2 && wire == wireVarint:
			m.Alias, m.HasAlias = v, true
		case field == 3 && wire == wireVarint:
			m.Timestamp = v
		case field == 4 && wire == wireVarint:
			m.Type = DataType(uint32(v))
		case field == 5 && wire == wireVarint:
			m.Historical = v != 0
		case field == 6 && wire == wireVarint:
			m.Transient = v != 0
		case field == 7 && wire == wireVarint:
			m.Null = v != 0
		case field == 9 && wire == wireBytes:
			if m.Properties == nil {
				m.Properties = &PropertySet{}
			}
			return m.Properties.unmarshal(body, 1)
		case field >= metricFirst && field <= metricFirst+9:
			return m.Value.unmarshal(field-metricFirst, wire, v, body, true, 0)
		}
		return nil
	})
}

func (s *PropertySet) unmarshal(b []byte, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: property sets nested deeper than %d", ErrMalformed, maxDepth)
	}
	return walk(b, func(field, wire int, _ uint64, body []byte) error {
		switch {
		case field == 1 && wire == wireBytes:
			s.Keys = append(s.Keys, string(body))
		case field == 2 && wire == wireBytes:
			var pv PropertyValue
			if err := pv.unmarshal(body, depth); err != nil {
				return err
			}
			s.Values = append(s.Values, pv)
		}
		return nil
	})
}

func (pv *PropertyValue) unmarshal(b []byte, depth int) error {
	return walk(b, func(field, wire int, v uint64, body []byte) error {
		switch {
		case field == 1 && wire == wireVarint:
			pv.Type = DataType(uint32(v))
		case field == 2 && wire == wireVarint:
			pv.Null = v != 0
		case field >= propertyFirst && field <= propertyFirst+8:
			return pv.Value.unmarshal(field-propertyFirst, wire, v, body, false, depth)
		}
		return nil
	})
}

// unmarshal sets the value from the field at offset off from int_value.
// A field of the wrong wire type is unknown and skipped; one of the oneof
// this package does not model (data set, template, property set list,
// extension) clears the value, since the last field of a oneof wins.
func (val *Value) unmarshal(off, wire int, v uint64, body []byte, metric bool, depth int) error {
	want := wireBytes
	switch off {
	case 0, 1, 4:
		want = wireVarint
	case 2:
		want = wireFixed32
	case 3:
		want = wireFixed64
	}
	if wire != want {
		return nil
	}
	switch off {
	case 0:
		*val = Value{Kind: IntValue, Num: uint64(uint32(v))}
	case 1:
		*val = Value{Kind: LongValue, Num: v}
	case 2:
		*val = Value{Kind: FloatValue, Num: v}
	case 3:
		*val = Value{Kind: DoubleValue, Num: v}
	case 4:
		*val = BoolOf(v != 0)
	case 5:
		*val = Value{Kind: StringValue, Str: string(body)}
	case 6:
		if metric {
			*val = Value{Kind: BytesValue, Bytes: append([]byte{}, body...)}
			return nil
		}
		if val.Kind != SetValue { // a message field met twice is merged
			*val = Value{Kind: SetValue, Set: &PropertySet{}}
		}
		return val.Set.unmarshal(body, depth+1)
	default:
		*val = Value{}
	}
	return nil
}

// walk calls f for each field of message b, in order: v is a varint's or
// fixed field's value, body a length-delimited field's bytes.
func walk(b []byte, f func(field, wire int, v uint64, body []byte) error) error {
	for len(b) > 0 {
		tag, n := varint(b)
		if n <= 0 {
			return fmt.Errorf("%w: bad tag", ErrMalformed)
		}
		b = b[n:]
		field, wire := tag>>3, int(tag&7)
		if field == 0 || field > 1<<29-1 {
			return fmt.Errorf("%w: field number %d", ErrMalformed, field)
		}
		var (
			v    uint64
			body []byte
		)
		switch wire {
		case wireVarint:
			v, n = varint(b)
			if n <= 0 {
				return fmt.Errorf("%w: bad varint in field %d", ErrMalformed, field)
			}
			b = b[n:]
		case wireFixed64:
			if len(b) < 8 {
				return fmt.Errorf("%w: field %d cut short", ErrMalformed, field)
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case wireFixed32:
			if len(b) < 4 {
				return fmt.Errorf("%w: field %d cut short", ErrMalformed, field)
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case wireBytes:
			l, n := varint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("%w: field %d: bad length", ErrMalformed, field)
			}
			body, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("%w: field %d: wire type %d not supported", ErrMalformed, field, wire)
		}
		if err := f(int(field), wire, v, body); err != nil {
			return err
		}
	}
	return nil
}

// varint decodes a varint at the start of b: its value and length, or
// n <= 0 when it is cut short or longer than 64 bits.
func varint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}
