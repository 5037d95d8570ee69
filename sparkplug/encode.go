package sparkplug

import "encoding/binary"

// Wire types of the protocol buffers encoding.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// Append appends p's protocol buffers encoding to dst and returns the
// extended buffer. Fields are written in field-number order.
func (p *Payload) Append(dst []byte) []byte {
	dst = appendVarintField(dst, 1, p.Timestamp)
	for i := range p.Metrics {
		dst = appendTag(dst, 2, wireBytes)
		dst = appendVarint(dst, uint64(p.Metrics[i].size()))
		dst = p.Metrics[i].append(dst)
	}
	if p.HasSeq {
		dst = appendVarintField(dst, 3, p.Seq)
	}
	if p.UUID != "" {
		dst = appendBytesField(dst, 4, []byte(p.UUID))
	}
	if len(p.Body) > 0 {
		dst = appendBytesField(dst, 5, p.Body)
	}
	return dst
}

// Marshal is Append to a new buffer.
func (p *Payload) Marshal() []byte { return p.Append(nil) }

func (m *Metric) append(dst []byte) []byte {
	if m.Name != "" {
		dst = appendStringField(dst, 1, m.Name)
	}
	if m.HasAlias {
		dst = appendVarintField(dst, 2, m.Alias)
	}
	if m.Timestamp != 0 {
		dst = appendVarintField(dst, 3, m.Timestamp)
	}
	if m.Type != 0 {
		dst = appendVarintField(dst, 4, uint64(m.Type))
	}
	if m.Historical {
		dst = appendVarintField(dst, 5, 1)
	}
	if m.Transient {
		dst = appendVarintField(dst, 6, 1)
	}
	if m.Null {
		dst = appendVarintField(dst, 7, 1)
	}
	if m.Properties != nil {
		dst = appendTag(dst, 9, wireBytes)
		dst = appendVarint(dst, uint64(m.Properties.size()))
		dst = m.Properties.append(dst)
	}
	return m.Value.append(dst, metricFirst)
}

func (m *Metric) size() int {
	n := 0
	if m.Name != "" {
		n += 1 + bytesSize(len(m.Name))
	}
	if m.HasAlias {
		n += 1 + varintSize(m.Alias)
	}
	if m.Timestamp != 0 {
		n += 1 + varintSize(m.Timestamp)
	}
	if m.Type != 0 {
		n += 1 + varintSize(uint64(m.Type))
	}
	for _, b := range []bool{m.Historical, m.Transient, m.Null} {
		if b {
			n += 2
		}
	}
	if m.Properties != nil {
		n += 1 + bytesSize(m.Properties.size())
	}
	return n + m.Value.size(metricFirst)
}

func (s *PropertySet) append(dst []byte) []byte {
	for _, k := range s.Keys {
		dst = appendStringField(dst, 1, k)
	}
	for i := range s.Values {
		dst = appendTag(dst, 2, wireBytes)
		dst = appendVarint(dst, uint64(s.Values[i].size()))
		dst = s.Values[i].append(dst)
	}
	return dst
}

func (s *PropertySet) size() int {
	n := 0
	for _, k := range s.Keys {
		n += 1 + bytesSize(len(k))
	}
	for i := range s.Values {
		n += 1 + bytesSize(s.Values[i].size())
	}
	return n
}

func (v *PropertyValue) append(dst []byte) []byte {
	if v.Type != 0 {
		dst = appendVarintField(dst, 1, uint64(v.Type))
	}
	if v.Null {
		dst = appendVarintField(dst, 2, 1)
	}
	return v.Value.append(dst, propertyFirst)
}

func (v *PropertyValue) size() int {
	n := 0
	if v.Type != 0 {
		n += 1 + varintSize(uint64(v.Type))
	}
	if v.Null {
		n += 2
	}
	return n + v.Value.size(propertyFirst)
}

// append writes the value's field; first is the field number of int_value
// (10 in Metric, 3 in PropertyValue): the others follow it in the same
// order in both messages, with bytes_value (Metric) and propertyset_value
// (PropertyValue) both at first+6. A kind the message has no field for
// is not written.
func (v *Value) append(dst []byte, first int) []byte {
	switch v.kindIn(first) {
	case IntValue:
		return appendVarintField(dst, first, uint64(uint32(v.Num)))
	case LongValue:
		return appendVarintField(dst, first+1, v.Num)
	case FloatValue:
		dst = appendTag(dst, first+2, wireFixed32)
		return binary.LittleEndian.AppendUint32(dst, uint32(v.Num))
	case DoubleValue:
		dst = appendTag(dst, first+3, wireFixed64)
		return binary.LittleEndian.AppendUint64(dst, v.Num)
	case BoolValue:
		return appendVarintField(dst, first+4, min(v.Num, 1))
	case StringValue:
		return appendStringField(dst, first+5, v.Str)
	case BytesValue:
		return appendBytesField(dst, first+6, v.Bytes)
	case SetValue:
		set := v.Set
		if set == nil {
			set = &PropertySet{}
		}
		dst = appendTag(dst, first+6, wireBytes)
		dst = appendVarint(dst, uint64(set.size()))
		return set.append(dst)
	}
	return dst
}

func (v *Value) size(first int) int {
	tag := func(off int) int { return varintSize(uint64(first+off) << 3) }
	switch v.kindIn(first) {
	case IntValue:
		return tag(0) + varintSize(uint64(uint32(v.Num)))
	case LongValue:
		return tag(1) + varintSize(v.Num)
	case FloatValue:
		return tag(2) + 4
	case DoubleValue:
		return tag(3) + 8
	case BoolValue:
		return tag(4) + 1
	case StringValue:
		return tag(5) + bytesSize(len(v.Str))
	case BytesValue:
		return tag(6) + bytesSize(len(v.Bytes))
	case SetValue:
		if v.Set == nil {
			return tag(6) + 1
		}
		return tag(6) + bytesSize(v.Set.size())
	}
	return 0
}

// kindIn is v.Kind if the message whose int_value is field first has a
// field for it, else NoValue.
func (v *Value) kindIn(first int) Kind {
	switch {
	case v.Kind == BytesValue && first != metricFirst, v.Kind == SetValue && first == metricFirst:
		return NoValue
	}
	return v.Kind
}

// The field numbers of int_value.
const (
	metricFirst   = 10
	propertyFirst = 3
)

func appendTag(dst []byte, field, wire int) []byte {
	return appendVarint(dst, uint64(field)<<3|uint64(wire))
}

func appendVarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func appendVarintField(dst []byte, field int, v uint64) []byte {
	return appendVarint(appendTag(dst, field, wireVarint), v)
}

func appendStringField(dst []byte, field int, s string) []byte {
	dst = appendVarint(appendTag(dst, field, wireBytes), uint64(len(s)))
	return append(dst, s...)
}

func appendBytesField(dst []byte, field int, b []byte) []byte {
	dst = appendVarint(appendTag(dst, field, wireBytes), uint64(len(b)))
	return append(dst, b...)
}

func varintSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// bytesSize is the size of a length-delimited field's length and body.
func bytesSize(n int) int { return varintSize(uint64(n)) + n }
