package sparkplug

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestMarshalKnownBytes(t *testing.T) {
	// Worked out by hand from the .proto: timestamp=1, one metric
	// {name "a", alias 1, datatype Int32, int_value -1 as uint32}, seq=0.
	p := Payload{Timestamp: 1, HasSeq: true, Metrics: []Metric{
		{Name: "a", Alias: 1, HasAlias: true, Type: Int32, Value: Int(Int32, -1)},
	}}
	want, _ := hex.DecodeString("0801120d0a01611001200350ffffffff0f1800")
	if got := p.Marshal(); !bytes.Equal(got, want) {
		t.Fatalf("Marshal:\n got %x\nwant %x", got, want)
	}
	// The NDEATH form: no seq at all.
	p = Payload{Timestamp: 2, Metrics: []Metric{{Name: BdSeq, Type: UInt64, Value: Int(UInt64, 3)}}}
	want, _ = hex.DecodeString("0802120b0a056264536571200858" + "03")
	if got := p.Marshal(); !bytes.Equal(got, want) {
		t.Fatalf("Marshal NDEATH:\n got %x\nwant %x", got, want)
	}
}

func samplePayloads() []Payload {
	props := &PropertySet{}
	props.Add("engUnit", PropertyValue{Type: String, Value: StringOf("°C")})
	props.Add("quality", PropertyValue{Type: Int32, Value: Int(Int32, 192)})
	props.Add("none", PropertyValue{Type: String, Null: true})
	nested := &PropertySet{}
	nested.Add("inner", PropertyValue{Type: Boolean, Value: BoolOf(true)})
	props.Add("set", PropertyValue{Type: PropertySetType, Value: Value{Kind: SetValue, Set: nested}})
	return []Payload{
		{},
		{Timestamp: 1700000000123, HasSeq: true, Seq: 255, UUID: "u-1", Body: []byte{0, 1, 2}},
		{Timestamp: 1, HasSeq: true, Seq: 0, Metrics: []Metric{
			{Name: "i8", Alias: 1, HasAlias: true, Type: Int8, Value: Int(Int8, -128)},
			{Name: "i16", Alias: 2, HasAlias: true, Type: Int16, Value: Int(Int16, -32768)},
			{Name: "i32", Alias: 3, HasAlias: true, Type: Int32, Value: Int(Int32, math.MinInt32)},
			{Name: "i64", Alias: 4, HasAlias: true, Type: Int64, Value: Int(Int64, math.MinInt64)},
			{Name: "u8", Alias: 5, HasAlias: true, Type: UInt8, Value: Int(UInt8, 255)},
			{Name: "u16", Alias: 6, HasAlias: true, Type: UInt16, Value: Int(UInt16, 65535)},
			{Name: "u32", Alias: 7, HasAlias: true, Type: UInt32, Value: Int(UInt32, math.MaxUint32)},
			{Name: "u64", Alias: 8, HasAlias: true, Type: UInt64, Value: Value{Kind: LongValue, Num: math.MaxUint64}},
			{Name: "f", Alias: 9, HasAlias: true, Type: Float, Value: FloatOf(-1.5)},
			{Name: "d", Alias: 10, HasAlias: true, Type: Double, Value: DoubleOf(math.Pi), Properties: props},
			{Name: "b", Alias: 11, HasAlias: true, Type: Boolean, Value: BoolOf(true)},
			{Name: "s", Alias: 12, HasAlias: true, Type: String, Value: StringOf("héllo")},
			{Name: "t", Alias: 13, HasAlias: true, Type: DateTime, Value: Int(DateTime, 1700000000000)},
			{Name: "bytes", Alias: 14, HasAlias: true, Type: Bytes, Value: Value{Kind: BytesValue, Bytes: []byte{}}},
			{Name: "null", Alias: 15, HasAlias: true, Type: Double, Null: true},
			{Alias: 16, HasAlias: true, Timestamp: 99, Historical: true, Transient: true, Value: DoubleOf(0)},
		}},
	}
}

func TestRoundTrip(t *testing.T) {
	for i, p := range samplePayloads() {
		b := p.Marshal()
		got, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("%d: Unmarshal: %v", i, err)
		}
		if !reflect.DeepEqual(*got, p) {
			t.Errorf("%d: round trip:\n got %+v\nwant %+v", i, *got, p)
		}
		if s := got.Marshal(); !bytes.Equal(s, b) {
			t.Errorf("%d: Marshal again differs:\n got %x\nwant %x", i, s, b)
		}
	}
}

func TestIntAs(t *testing.T) {
	for _, tc := range []struct {
		t    DataType
		v    int64
		kind Kind
	}{
		{Int8, -1, IntValue}, {Int16, -300, IntValue}, {Int32, math.MinInt32, IntValue},
		{UInt8, 200, IntValue}, {UInt16, 65535, IntValue},
		{UInt32, math.MaxUint32, LongValue}, {Int64, -5, LongValue}, {DateTime, 1 << 41, LongValue},
	} {
		v := Int(tc.t, tc.v)
		if v.Kind != tc.kind {
			t.Errorf("Int(%v, %d).Kind = %v, want %v", tc.t, tc.v, v.Kind, tc.kind)
		}
		if got, ok := v.IntAs(tc.t); !ok || got != tc.v {
			t.Errorf("Int(%v, %d).IntAs = %d, %v", tc.t, tc.v, got, ok)
		}
	}
	if _, ok := DoubleOf(1).IntAs(Int32); ok {
		t.Error("a double read as an integer")
	}
	// An Int32 from a peer that wrote the negative number sign-extended to
	// 64 bits (as proto's int32 would) reads the same.
	b, _ := hex.DecodeString("12" + "0d" + "2003" + "50ffffffffffffffffff01" + "")
	b[1] = byte(len(b) - 2)
	p, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := p.Metrics[0].Int(); !ok || n != -1 {
		t.Errorf("sign-extended int_value = %d, %v; want -1", n, ok)
	}
}

func TestUnmarshalSkips(t *testing.T) {
	// A metric with metadata (8), a data set value (17) after a double,
	// and an unknown field 40 of each wire type; the payload with an
	// unknown field too and a timestamp of the wrong wire type.
	m := []byte{0x0a, 1, 'x'}
	m = append(m, 0x42, 2, 0x08, 0x01)                // metadata {is_multi_part: true}
	m = append(m, 0x69, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f) // double_value 1.0
	m = append(m, 0x8a, 0x01, 2, 0x08, 0x01)          // dataset_value {num_of_columns 1}
	m = append(m, 0xc0, 0x02, 0x05)                   // field 40 varint
	p := []byte{0x12, byte(len(m))}
	p = append(p, m...)
	p = append(p, 0x0a, 0x01, 0x00)       // field 1 as bytes: unknown
	p = append(p, 0xc5, 0x02, 1, 2, 3, 4) // field 40 fixed32
	got, err := Unmarshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := &Payload{Metrics: []Metric{{Name: "x"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestUnmarshalMalformed(t *testing.T) {
	for name, hx := range map[string]string{
		"tag cut short":        "80",
		"varint cut short":     "0880",
		"varint too long":      "08ffffffffffffffffff7f",
		"length beyond end":    "1205",
		"fixed64 cut short":    "09000000",
		"fixed32 cut short":    "0d00",
		"group":                "0b",
		"field zero":           "0001",
		"bad nested metric":    "120180",
		"bad nested property":  "12044a021201",
		"deep property sets":   "",
		"wire type 6 (unused)": "0e",
	} {
		b, _ := hex.DecodeString(hx)
		if name == "deep property sets" {
			b = deepProperties(maxDepth + 2)
		}
		if _, err := Unmarshal(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	if _, err := Unmarshal(deepProperties(maxDepth - 1)); err != nil {
		t.Errorf("property sets nested %d deep: %v", maxDepth-1, err)
	}
}

// deepProperties is a payload whose one metric has property sets nested
// depth deep.
func deepProperties(depth int) []byte {
	set := &PropertySet{}
	inner := set
	for range depth - 1 {
		next := &PropertySet{}
		inner.Add("k", PropertyValue{Type: PropertySetType, Value: Value{Kind: SetValue, Set: next}})
		inner = next
	}
	p := Payload{Metrics: []Metric{{Name: "m", Properties: set}}}
	return p.Marshal()
}

func TestTopic(t *testing.T) {
	top := Topic("farm", DDATA, "gw1", "rain-1")
	if top != "spBv1.0/farm/DDATA/gw1/rain-1" {
		t.Fatal(top)
	}
	g, mt, n, d, err := ParseTopic(top)
	if err != nil || g != "farm" || mt != DDATA || n != "gw1" || d != "rain-1" {
		t.Fatalf("ParseTopic = %q %q %q %q %v", g, mt, n, d, err)
	}
	if _, _, _, _, err := ParseTopic("spBv1.0/STATE"); err == nil {
		t.Error("ParseTopic accepted a short topic")
	}
	for _, bad := range []string{"", "a/b", "a+", "#"} {
		if CheckID(bad) == nil {
			t.Errorf("CheckID(%q) = nil", bad)
		}
	}
}
