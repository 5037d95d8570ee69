package sparkplugtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"fieldlink/sparkplug"
)

// Diff compares Tahu's decoding of a payload with the payload that was
// encoded, field by field: timestamp, seq, and each metric's name, alias,
// datatype, value (or null), timestamp, is_historical and properties
// (those of scalar values). It returns the differences, none when they
// agree.
func Diff(got Payload, want *sparkplug.Payload) []string {
	var d []string
	add := func(format string, a ...any) { d = append(d, fmt.Sprintf(format, a...)) }
	if s := str(got.Timestamp); s != strconv.FormatUint(want.Timestamp, 10) {
		add("timestamp %s, want %d", s, want.Timestamp)
	}
	switch {
	case want.HasSeq && str(got.Seq) != strconv.FormatUint(want.Seq, 10):
		add("seq %s, want %d", str(got.Seq), want.Seq)
	case !want.HasSeq && got.Seq != nil:
		add("seq %s, want none", *got.Seq)
	}
	if len(got.Metrics) != len(want.Metrics) {
		add("%d metrics, want %d", len(got.Metrics), len(want.Metrics))
		return d
	}
	for i := range want.Metrics {
		g, w := &got.Metrics[i], &want.Metrics[i]
		at := func(format string, a ...any) { add("metric %d (%q): "+format, append([]any{i, w.Name}, a...)...) }
		if (w.Name != "") != (g.Name != nil) || (g.Name != nil && *g.Name != w.Name) {
			at("name %s", str(g.Name))
		}
		if w.HasAlias != (g.Alias != nil) || (g.Alias != nil && *g.Alias != strconv.FormatUint(w.Alias, 10)) {
			at("alias %s, want %d", str(g.Alias), w.Alias)
		}
		if w.Type != 0 && g.Type != w.Type.String() {
			at("type %s, want %s", g.Type, w.Type)
		}
		if (w.Timestamp != 0) != (g.Timestamp != nil) || (g.Timestamp != nil && *g.Timestamp != strconv.FormatUint(w.Timestamp, 10)) {
			at("timestamp %s, want %d", str(g.Timestamp), w.Timestamp)
		}
		if w.Historical != (g.IsHistorical != nil && *g.IsHistorical) {
			at("is_historical %v, want %v", g.IsHistorical != nil && *g.IsHistorical, w.Historical)
		}
		if w.Type == sparkplug.Unknown {
			// Tahu reads a value by its datatype: without one, none.
		} else if w.Null || w.Value.Kind == sparkplug.NoValue {
			if w.Null && string(g.Value) != "null" {
				at("value %s, want null", g.Value)
			}
		} else if msg := valueDiff(g.Value, w.Type, w.Value); msg != "" {
			at("value: %s", msg)
		}
		if w.Properties == nil {
			continue
		}
		for k, key := range w.Properties.Keys {
			wp := w.Properties.Values[k]
			gp, ok := g.Properties[key]
			switch {
			case !ok:
				at("property %q missing", key)
			case gp.Type != wp.Type.String():
				at("property %q type %s, want %s", key, gp.Type, wp.Type)
			case wp.Null:
				if string(gp.Value) != "null" {
					at("property %q value %s, want null", key, gp.Value)
				}
			case wp.Value.Kind == sparkplug.SetValue:
			default:
				if msg := valueDiff(gp.Value, wp.Type, wp.Value); msg != "" {
					at("property %q value: %s", key, msg)
				}
			}
		}
	}
	return d
}

// valueDiff compares a value as Tahu decoded it with what was encoded.
func valueDiff(got json.RawMessage, t sparkplug.DataType, v sparkplug.Value) string {
	var want any
	switch t {
	case sparkplug.Int8, sparkplug.Int16, sparkplug.Int32, sparkplug.UInt8, sparkplug.UInt16, sparkplug.UInt32:
		n, _ := v.IntAs(t)
		want = float64(n)
	case sparkplug.Int64:
		n, _ := v.IntAs(t)
		want = strconv.FormatInt(n, 10)
	case sparkplug.UInt64, sparkplug.DateTime:
		want = strconv.FormatUint(v.Num, 10)
	case sparkplug.Float, sparkplug.Double:
		f, _ := v.Float64()
		want = f
	case sparkplug.Boolean:
		want, _ = v.Bool()
	case sparkplug.String, sparkplug.Text, sparkplug.UUID:
		want = v.Str
	case sparkplug.Bytes, sparkplug.File:
		want = base64.StdEncoding.EncodeToString(v.Bytes)
	default:
		return fmt.Sprintf("datatype %v not compared", t)
	}
	var g any
	dec := json.NewDecoder(bytes.NewReader(got))
	if err := dec.Decode(&g); err != nil {
		return fmt.Sprintf("%s: %v", got, err)
	}
	if wf, ok := want.(float64); ok {
		if gf, ok := g.(float64); ok && (gf == wf || math.IsNaN(wf) && math.IsNaN(gf)) {
			return ""
		}
	} else if g == want {
		return ""
	}
	return fmt.Sprintf("%s, want %v", got, want)
}

func str(p *string) string {
	if p == nil {
		return "<none>"
	}
	return *p
}
