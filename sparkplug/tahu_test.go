package sparkplug_test

import (
	"math"
	"testing"

	"fieldlink/sparkplug"
	"fieldlink/sparkplug/sparkplugtest"
)

// TestTahuDecodesOurPayloads has Eclipse Tahu's JavaScript library decode
// what this package encodes, and compares every field.
func TestTahuDecodesOurPayloads(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	samples := sparkplug.SamplePayloads()
	var encoded [][]byte
	for _, p := range samples {
		encoded = append(encoded, p.Marshal())
	}
	got := tahu.Decode(t, encoded...)
	for i := range samples {
		if samples[i].Timestamp == 0 {
			continue // Tahu leaves out a zero timestamp; nothing to compare
		}
		for _, d := range sparkplugtest.Diff(got[i], &samples[i]) {
			t.Errorf("payload %d: %s", i, d)
		}
	}
}

// TestDiffCanFail checks that the comparison sees a wrong value, alias,
// type and seq: a cross-check that could not fail would prove nothing.
func TestDiffCanFail(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	p := sparkplug.Payload{Timestamp: 5, HasSeq: true, Seq: 7, Metrics: []sparkplug.Metric{
		{Name: "x", Alias: 1, HasAlias: true, Type: sparkplug.Double, Value: sparkplug.DoubleOf(1.25)},
	}}
	got := tahu.Decode(t, p.Marshal())[0]
	if d := sparkplugtest.Diff(got, &p); len(d) != 0 {
		t.Fatalf("same payload: %v", d)
	}
	for name, change := range map[string]func(*sparkplug.Payload){
		"value": func(q *sparkplug.Payload) { q.Metrics[0].Value = sparkplug.DoubleOf(1.5) },
		"alias": func(q *sparkplug.Payload) { q.Metrics[0].Alias = 2 },
		"type":  func(q *sparkplug.Payload) { q.Metrics[0].Type = sparkplug.Float },
		"seq":   func(q *sparkplug.Payload) { q.Seq = 8 },
		"null":  func(q *sparkplug.Payload) { q.Metrics[0].Null = true },
	} {
		q := p
		q.Metrics = append([]sparkplug.Metric(nil), p.Metrics...)
		change(&q)
		if d := sparkplugtest.Diff(got, &q); len(d) == 0 {
			t.Errorf("a changed %s went unseen", name)
		}
	}
}

// TestWeDecodeTahuPayloads decodes what Tahu encodes: an NCMD rebirth and
// a command with one metric of each scalar datatype.
func TestWeDecodeTahuPayloads(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	type metric struct {
		Name  string `json:"name,omitempty"`
		Alias uint64 `json:"alias,omitempty"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	}
	type payload struct {
		Timestamp uint64   `json:"timestamp"`
		Seq       *uint64  `json:"seq,omitempty"`
		Metrics   []metric `json:"metrics"`
	}
	seq := uint64(3)
	in := []payload{
		{Timestamp: 1700000000001, Metrics: []metric{{Name: sparkplug.Rebirth, Type: "Boolean", Value: true}}},
		{Timestamp: 1700000000002, Seq: &seq, Metrics: []metric{
			{Name: "i8", Type: "Int8", Value: -5},
			{Name: "i16", Type: "Int16", Value: -30000},
			{Name: "i32", Type: "Int32", Value: math.MinInt32},
			{Name: "u16", Type: "UInt16", Value: 65535},
			{Name: "u32", Type: "UInt32", Value: 4000000000},
			{Name: "i64", Type: "Int64", Value: -9007199254740991},
			{Name: "f", Type: "Float", Value: 2.5},
			{Name: "d", Type: "Double", Value: 0.1},
			{Name: "b", Type: "Boolean", Value: false},
			{Name: "s", Type: "String", Value: "on"},
			{Alias: 7, Type: "Double", Value: 12.5},
			{Name: "n", Type: "Double", Value: nil},
		}},
	}
	objs := make([]any, len(in))
	for i := range in {
		objs[i] = in[i]
	}
	enc := tahu.Encode(t, objs...)

	p, err := sparkplug.Unmarshal(enc[0])
	if err != nil {
		t.Fatal(err)
	}
	m, ok := p.Metric(sparkplug.Rebirth)
	if b, isBool := m.Value.Bool(); !ok || !isBool || !b || m.Type != sparkplug.Boolean || p.Timestamp != 1700000000001 || p.HasSeq {
		t.Fatalf("rebirth decoded as %+v", p)
	}

	p, err = sparkplug.Unmarshal(enc[1])
	if err != nil {
		t.Fatal(err)
	}
	if !p.HasSeq || p.Seq != 3 || len(p.Metrics) != len(in[1].Metrics) {
		t.Fatalf("decoded %+v", p)
	}
	ints := map[string]int64{"i8": -5, "i16": -30000, "i32": math.MinInt32, "u16": 65535, "u32": 4000000000, "i64": -9007199254740991}
	for i, w := range in[1].Metrics {
		g := &p.Metrics[i]
		if g.Name != w.Name || g.Type.String() != w.Type {
			t.Errorf("metric %d: %q %v, want %q %s", i, g.Name, g.Type, w.Name, w.Type)
		}
		switch want, isInt := ints[w.Name]; {
		case isInt:
			if n, ok := g.Int(); !ok || n != want {
				t.Errorf("%s = %d, %v; want %d", w.Name, n, ok, want)
			}
		case w.Value == nil:
			if !g.Null {
				t.Errorf("%s: not null", w.Name)
			}
		case w.Type == "Float" || w.Type == "Double":
			if f, ok := g.Value.Float64(); !ok || f != w.Value.(float64) {
				t.Errorf("%s = %v, %v; want %v", w.Name, f, ok, w.Value)
			}
		case w.Type == "Boolean":
			if b, ok := g.Value.Bool(); !ok || b != w.Value.(bool) {
				t.Errorf("%s = %v, %v", w.Name, b, ok)
			}
		case w.Type == "String":
			if g.Value.Kind != sparkplug.StringValue || g.Value.Str != w.Value.(string) {
				t.Errorf("%s = %+v", w.Name, g.Value)
			}
		}
	}
	if g := p.Metrics[10]; !g.HasAlias || g.Alias != 7 || g.Name != "" {
		t.Errorf("alias-only metric decoded as %+v", g)
	}
}
