package packet_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"fieldlink/packet"
)

// tokens returns the JSON tokens of data, numbers as json.Number.
func tokens(t *testing.T, data []byte) []any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var out []any
	for {
		tok, err := d.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%v in %s", err, data)
		}
		out = append(out, tok)
	}
}

// viaStdlib returns s as it reads back after encoding/json has written it:
// the reference for every string AppendJSON writes.
func viaStdlib(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// floatText is the documented text of a float: 'f' format, no "-0".
func floatText(f float64, prec int) string {
	s := strconv.FormatFloat(f, 'f', prec, 64)
	if strings.HasPrefix(s, "-") && strings.Trim(s[1:], "0.") == "" {
		s = s[1:]
	}
	return s
}

var headKeys = map[string]bool{
	"Date": true, "Time": true, "DataType": true, "GatewayId": true, "DeviceId": true,
	"Seq": true, "TS": true, "Epoch": true, "Alarm": true, "AlarmFields": true, "ClockUnsynced": true,
}

// FuzzAppendJSON checks, for arbitrary names, strings, numbers and times,
// that AppendJSON writes valid JSON that reads back, token by token, as what
// encoding/json would have written for the same strings and numbers, and
// that Decode reads it back to a packet that encodes to the same JSON.
func FuzzAppendJSON(f *testing.F) {
	f.Add("FarmId", "001", "rain-1", "", uint64(42), int64(1577880000), "Temperature", "25", "Rainfall", 0.0, int8(-1), "Humidity", int64(50), false, false, "")
	f.Add("MineId", "M-07", "gas-12", "3", uint64(math.MaxUint64), int64(-1), "CH4", "1.25", "CO", 31.5, int8(1), "O2", int64(-20), true, true, "CH4")
	f.Add("", `a"b\c`, "<dev>&", "\xff", uint64(0), int64(math.MaxInt64), "\x00\x1f", "\u2028\u2029\xe6\xb8", "温度", math.Inf(-1), int8(3), "", int64(math.MinInt64), true, false, "\t")
	f.Add("Seq", "", "", "", uint64(1), int64(0), "x", "", "x", math.Copysign(0, -1), int8(2), "x", int64(0), false, true, "")
	f.Add("id", "s", "d", "e", uint64(1), int64(86400*365*3000), "n", "v", "f", 1e-300, int8(-1), "i", int64(1), true, true, "n")

	zones := []*time.Location{nil, mustZone(f, "Asia/Shanghai"), mustZone(f, "America/New_York")}
	lo := time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9999, 12, 30, 0, 0, 0, 0, time.UTC).Unix()

	f.Fuzz(func(t *testing.T, idField, site, dev, epoch string, seq uint64, sec int64,
		name1, s1, name2 string, f2 float64, prec int8, name3 string, i3 int64, b, numbers bool, alarm string) {
		n := sec % (hi - lo)
		if n < 0 {
			n += hi - lo
		}
		loc := zones[n%int64(len(zones))]
		p := packet.Packet{
			At:        time.Unix(lo+n, n%1000*1e6),
			Loc:       loc,
			IDField:   idField,
			SiteID:    site,
			DataType:  s1,
			GatewayID: name2,
			DeviceID:  dev,
			Epoch:     epoch,
			Seq:       seq,
			Fields: []packet.Field{
				{name1, packet.String(s1)},
				{name2, packet.Float(f2, int(prec))},
				{name3, packet.Int(i3)},
				{"flag", packet.Bool(b)},
			},
		}
		if alarm != "" {
			p.AlarmFields = []string{alarm, name1}
		}
		style := packet.Strings
		if numbers {
			style = packet.Numbers
		}
		out := p.AppendJSON([]byte("prefix"), style)
		if !bytes.HasPrefix(out, []byte("prefix")) {
			t.Fatalf("AppendJSON overwrote dst: %q", out)
		}
		out = out[len("prefix"):]
		if !json.Valid(out) {
			t.Fatalf("invalid JSON: %s", out)
		}

		// The expected token stream, from encoding/json and the time package.
		if loc == nil {
			loc = time.UTC
		}
		local := p.At.In(loc)
		if idField == "" {
			idField = packet.DefaultIDField
		}
		s := func(v string) string { return viaStdlib(t, v) }
		want := []any{
			json.Delim('{'), "DataHead", json.Delim('{'),
			"Date", local.Format("2006-01-02"), "Time", local.Format("15:04:05"),
			s(idField), s(site), "DataType", s(s1), "GatewayId", s(name2), "DeviceId", s(dev),
			"Seq", json.Number(strconv.FormatUint(seq, 10)), "TS", p.At.UTC().Format("2006-01-02T15:04:05.000Z"),
		}
		if epoch != "" {
			want = append(want, "Epoch", s(epoch))
		}
		if alarm != "" {
			want = append(want, "Alarm", "True", "AlarmFields", json.Delim('['), s(alarm), s(name1), json.Delim(']'))
		}
		want = append(want, json.Delim('}'), "DataBody", json.Delim('{'), s(name1), s(s1), s(name2))
		text := floatText(f2, max(int(prec), -1))
		switch {
		case !numbers:
			want = append(want, text, s(name3), strconv.FormatInt(i3, 10), "flag", map[bool]string{true: "True", false: "False"}[b])
		case math.IsNaN(f2) || math.IsInf(f2, 0):
			want = append(want, nil, s(name3), json.Number(strconv.FormatInt(i3, 10)), "flag", b)
		default:
			want = append(want, json.Number(text), s(name3), json.Number(strconv.FormatInt(i3, 10)), "flag", b)
		}
		want = append(want, json.Delim('}'), json.Delim('}'))
		got := tokens(t, out)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("tokens differ\ngot:  %q\nwant: %q\njson: %s", got, want, out)
		}

		// A number reads back as the number encoding/json would read back:
		// f2 itself in shortest form, f2 rounded to prec decimals otherwise.
		if numbers && !math.IsNaN(f2) && !math.IsInf(f2, 0) {
			var body map[string]json.RawMessage
			var x, ref float64
			if err := json.Unmarshal(out, &struct{ DataBody *map[string]json.RawMessage }{&body}); err != nil {
				t.Fatal(err)
			}
			if k := s(name2); k != s(name1) && k != s(name3) && k != "flag" {
				if err := json.Unmarshal(body[k], &x); err != nil {
					t.Fatal(err)
				}
				if prec < 0 {
					std, _ := json.Marshal(f2)
					if err := json.Unmarshal(std, &ref); err != nil {
						t.Fatal(err)
					}
				} else {
					ref, _ = strconv.ParseFloat(strconv.FormatFloat(f2, 'f', int(prec), 64), 64)
				}
				if x != ref {
					t.Fatalf("%s reads back as %v, encoding/json's reference as %v", body[k], x, ref)
				}
			}
		}

		// Decode reads it back; the decoded packet encodes to the same JSON
		// (the same bytes when every input string was valid UTF-8).
		if headKeys[idField] {
			return // an id field named like another head key is ambiguous
		}
		d, err := packet.Decode(out)
		if err != nil {
			t.Fatalf("Decode: %v\n%s", err, out)
		}
		again := d.AppendJSON(nil, style)
		if !reflect.DeepEqual(tokens(t, again), got) {
			t.Fatalf("re-encoded packet differs\ngot:  %s\nwant: %s", again, out)
		}
		valid := true
		for _, v := range []string{idField, site, dev, epoch, name1, s1, name2, name3, alarm} {
			valid = valid && utf8.ValidString(v)
		}
		if valid && !bytes.Equal(again, out) {
			t.Fatalf("re-encoded packet differs\ngot:  %s\nwant: %s", again, out)
		}
		if d.Seq != seq || !d.At.Equal(p.At.Truncate(time.Millisecond)) || d.Alarm() != (alarm != "") {
			t.Fatalf("decoded Seq, At, Alarm = %d, %v, %v", d.Seq, d.At, d.Alarm())
		}
	})
}
