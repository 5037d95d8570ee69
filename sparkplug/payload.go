package sparkplug

import (
	"math"
	"strconv"
)

// DataType is a metric's or property's datatype (the .proto's enum).
type DataType uint32

// The datatypes of Sparkplug B 3.0. The array types, DataSet, Template and
// File have numbers here so that a decoded payload keeps them, but this
// package writes none of their values.
const (
	Unknown         DataType = 0
	Int8            DataType = 1
	Int16           DataType = 2
	Int32           DataType = 3
	Int64           DataType = 4
	UInt8           DataType = 5
	UInt16          DataType = 6
	UInt32          DataType = 7
	UInt64          DataType = 8
	Float           DataType = 9
	Double          DataType = 10
	Boolean         DataType = 11
	String          DataType = 12
	DateTime        DataType = 13
	Text            DataType = 14
	UUID            DataType = 15
	DataSet         DataType = 16
	Bytes           DataType = 17
	File            DataType = 18
	Template        DataType = 19
	PropertySetType DataType = 20
	PropertySetList DataType = 21
)

var typeNames = [...]string{"Unknown", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64",
	"Float", "Double", "Boolean", "String", "DateTime", "Text", "UUID", "DataSet", "Bytes", "File", "Template",
	"PropertySet", "PropertySetList"}

// String is the datatype's name in the .proto (and in Eclipse Tahu's
// JavaScript library), or its number.
func (t DataType) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "DataType(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// Kind is which field of the value oneof is set.
type Kind uint8

// The value fields. NoValue: none is set (a null metric, or a birth
// that declares only name and datatype).
const (
	NoValue Kind = iota
	IntValue
	LongValue
	FloatValue
	DoubleValue
	BoolValue
	StringValue
	BytesValue
	SetValue // a property's nested PropertySet (properties only)
)

// Value is the one value a metric or a property carries, as the wire has
// it: Num holds int_value and long_value, the bits of float_value and
// double_value, and 1 or 0 for boolean_value.
type Value struct {
	Kind  Kind
	Num   uint64
	Str   string
	Bytes []byte
	Set   *PropertySet // SetValue only
}

// Int is the value of an integer of datatype t: the field Tahu's libraries
// use for t, with a negative Int8, Int16 or Int32 as its 32-bit two's
// complement. For a datatype that is not an integer it is the zero Value.
func Int(t DataType, v int64) Value {
	switch t {
	case Int8, Int16, Int32:
		return Value{Kind: IntValue, Num: uint64(uint32(int32(v)))}
	case UInt8, UInt16:
		return Value{Kind: IntValue, Num: uint64(uint32(v))}
	case UInt32, Int64, UInt64, DateTime:
		return Value{Kind: LongValue, Num: uint64(v)}
	}
	return Value{}
}

// FloatOf is a Float value; DoubleOf a Double; BoolOf a Boolean; StringOf
// a String, Text or UUID.
func FloatOf(f float32) Value  { return Value{Kind: FloatValue, Num: uint64(math.Float32bits(f))} }
func DoubleOf(f float64) Value { return Value{Kind: DoubleValue, Num: math.Float64bits(f)} }
func BoolOf(b bool) Value {
	v := Value{Kind: BoolValue}
	if b {
		v.Num = 1
	}
	return v
}
func StringOf(s string) Value { return Value{Kind: StringValue, Str: s} }

// Float64 is a float or double value as a float64.
func (v Value) Float64() (float64, bool) {
	switch v.Kind {
	case FloatValue:
		return float64(math.Float32frombits(uint32(v.Num))), true
	case DoubleValue:
		return math.Float64frombits(v.Num), true
	}
	return 0, false
}

// Bool is a boolean value.
func (v Value) Bool() (b, ok bool) { return v.Num != 0, v.Kind == BoolValue }

// IntAs is an integer value read as datatype t: sign-extended from 32 bits
// for Int8, Int16 and Int32 in int_value, as it is otherwise. ok is false
// when v holds no integer.
func (v Value) IntAs(t DataType) (n int64, ok bool) {
	switch v.Kind {
	case IntValue:
		switch t {
		case Int8, Int16, Int32:
			return int64(int32(uint32(v.Num))), true
		}
		return int64(uint32(v.Num)), true
	case LongValue:
		return int64(v.Num), true
	}
	return 0, false
}

// Metric is one metric of a payload. Name is written when not empty;
// Alias when HasAlias; Timestamp and Type when not zero.
type Metric struct {
	Name       string
	Alias      uint64
	HasAlias   bool
	Timestamp  uint64 // ms since the Unix epoch, UTC
	Type       DataType
	Historical bool // is_historical, written when true
	Transient  bool // is_transient, written when true
	Null       bool // is_null, written when true; then Value is NoValue
	Properties *PropertySet
	Value      Value
}

// Int is the metric's integer value read as its datatype (see
// [Value.IntAs]).
func (m *Metric) Int() (int64, bool) { return m.Value.IntAs(m.Type) }

// PropertySet is a metric's properties: Keys[i] names Values[i].
type PropertySet struct {
	Keys   []string
	Values []PropertyValue
}

// PropertyValue is one property: its datatype, and its value or Null.
type PropertyValue struct {
	Type  DataType
	Null  bool
	Value Value
}

// Get returns the property named key.
func (s *PropertySet) Get(key string) (PropertyValue, bool) {
	if s == nil {
		return PropertyValue{}, false
	}
	for i, k := range s.Keys {
		if k == key && i < len(s.Values) {
			return s.Values[i], true
		}
	}
	return PropertyValue{}, false
}

// Add appends a property.
func (s *PropertySet) Add(key string, v PropertyValue) {
	s.Keys = append(s.Keys, key)
	s.Values = append(s.Values, v)
}

// Payload is one Sparkplug B message body. Timestamp is always written;
// Seq when HasSeq (every message of an edge node but NDEATH); UUID and
// Body when not empty.
type Payload struct {
	Timestamp uint64 // ms since the Unix epoch, UTC
	Metrics   []Metric
	Seq       uint64
	HasSeq    bool
	UUID      string
	Body      []byte
}

// Metric returns the first metric named name.
func (p *Payload) Metric(name string) (*Metric, bool) {
	for i := range p.Metrics {
		if p.Metrics[i].Name == name {
			return &p.Metrics[i], true
		}
	}
	return nil, false
}
