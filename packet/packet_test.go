package packet_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the binary embeds the zone database too; tests must not depend on the host's

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// farmRain is the platform's example packet: a rain gauge on farm 001, read
// at 20:00 Beijing time.
func farmRain(t testing.TB) packet.Packet {
	return packet.Packet{
		At:        time.Date(2020, 1, 1, 12, 0, 0, 0, time.UTC),
		Loc:       mustZone(t, "Asia/Shanghai"),
		IDField:   "FarmId",
		SiteID:    "001",
		DataType:  "Rain",
		GatewayID: "gw-01",
		DeviceID:  "rain-1",
		Seq:       42,
		Fields: []packet.Field{
			{"Temperature", packet.Float(25, -1)},
			{"Humidity", packet.Int(50)},
			{"WindSpeed", packet.Float(15, 0)},
			{"Light", packet.Uint(10)},
			{"isRain", packet.Bool(false)},
			{"Rainfall", packet.Float(0, -1)},
		},
	}
}

// mineGas is an alarm from a gas detector: CH4 and CO above their thresholds.
func mineGas(t testing.TB) packet.Packet {
	return packet.Packet{
		At:          time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC),
		Loc:         mustZone(t, "Asia/Shanghai"),
		IDField:     "MineId",
		SiteID:      "M-07",
		DataType:    "Gas",
		GatewayID:   "gw-mine-3",
		DeviceID:    "gas-12",
		Epoch:       "3",
		Seq:         18446744073709551615,
		AlarmFields: []string{"CH4", "CO"},
		Fields: []packet.Field{
			{"CH4", packet.Float(1.25, 2)},
			{"CO", packet.Int(31)},
			{"O2", packet.Float(20.9, 1)},
			{"Temperature", packet.Float(-3.5, 1)},
			{"Fan", packet.Bool(true)},
			{"Status", packet.String("RUN")},
		},
	}
}

func goldenCases(t testing.TB) []struct {
	name  string
	p     packet.Packet
	style packet.ValueStyle
} {
	return []struct {
		name  string
		p     packet.Packet
		style packet.ValueStyle
	}{
		{"farm-rain", farmRain(t), packet.Strings},
		{"farm-rain-numbers", farmRain(t), packet.Numbers},
		{"mine-gas-alarm", mineGas(t), packet.Strings},
		{"mine-gas-alarm-numbers", mineGas(t), packet.Numbers},
		{"escaping", packet.Packet{
			// IDField empty: the default, FarmId.
			At:        time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			SiteID:    `a"b\c/d`,
			DataType:  "<Rain>&'",
			GatewayID: "gw\x00\x01\x1f\x7f",
			DeviceID:  "\b\f\n\r\t",
			Epoch:     "bad\xff\xfeutf8",
			Fields: []packet.Field{
				{"温度", packet.String("摄氏 25°C")},
				{"line\u2028para\u2029", packet.String("é\u00a0\U0001F327")},
				{"half\xe6\xb8", packet.String("\xed\xa0\x80")}, // truncated rune; a UTF-16 surrogate
				{"", packet.String("")},
				{"quote\"", packet.Value{}},
			},
		}, packet.Strings},
		{"timezone-next-day", packet.Packet{
			// 20:30:15.75 UTC on 29 November is 04:30:15 on 30 November in
			// Shanghai; the fraction is truncated in Time and kept, to the
			// millisecond, in TS.
			At:        time.Date(2026, 11, 29, 20, 30, 15, 750e6, time.UTC),
			Loc:       mustZone(t, "Asia/Shanghai"),
			IDField:   "FarmId",
			SiteID:    "002",
			DataType:  "Weather",
			GatewayID: "gw-02",
			DeviceID:  "ws-1",
			Seq:       7,
			Fields:    []packet.Field{{"Temperature", packet.Float(-0.5, 1)}},
		}, packet.Strings},
		{"special-floats", specialFloats(), packet.Strings},
		{"special-floats-numbers", specialFloats(), packet.Numbers},
	}
}

// Variables, so that their sum is computed in float64, not as an exact
// constant: 0.30000000000000004.
var point1, point2 = 0.1, 0.2

func specialFloats() packet.Packet {
	return packet.Packet{
		At:        time.Unix(0, 0),
		IDField:   "MineId",
		SiteID:    "lab",
		DataType:  "Test",
		GatewayID: "gw",
		DeviceID:  "dev",
		Fields: []packet.Field{
			{"nan", packet.Float(math.NaN(), 2)},
			{"inf", packet.Float(math.Inf(1), -1)},
			{"-inf", packet.Float(math.Inf(-1), 1)},
			{"negzero", packet.Float(math.Copysign(0, -1), -1)},
			{"negzero2", packet.Float(math.Copysign(0, -1), 2)},
			{"roundsToZero", packet.Float(-0.004, 2)},
			{"roundsAway", packet.Float(-0.006, 2)},
			{"shortest", packet.Float(point1+point2, -1)},
			{"fixed", packet.Float(point1+point2, 3)},
			{"scaled", packet.Float(25, 1)},
			{"big", packet.Float(1e21, -1)},
			{"tiny", packet.Float(1.5e-7, -1)},
			{"minInt", packet.Int(math.MinInt64)},
			{"maxUint", packet.Uint(math.MaxUint64)},
		},
	}
}

// TestGolden compares each packet with testdata/NAME.golden: the JSON line
// and a newline, as `gateway poll` prints it. Run with -update to rewrite.
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got := append(tc.p.AppendJSON(nil, tc.style), '\n')
			if !json.Valid(got) {
				t.Errorf("invalid JSON: %s", got)
			}
			testtool.Golden(t, filepath.Join("testdata", tc.name+".golden"), got, *update)
		})
	}
}

// TestPlatformExample pins the farm packet to the platform's documented
// example, byte for byte, independently of the golden file. TS, the
// gateway's own addition, carries milliseconds.
func TestPlatformExample(t *testing.T) {
	const want = `{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","DataType":"Rain","GatewayId":"gw-01","DeviceId":"rain-1","Seq":42,"TS":"2020-01-01T12:00:00.000Z"},` +
		`"DataBody":{"Temperature":"25","Humidity":"50","WindSpeed":"15","Light":"10","isRain":"False","Rainfall":"0"}}`
	p := farmRain(t)
	if got := string(p.AppendJSON(nil, packet.Strings)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestRoundTrip decodes every golden packet and encodes it again.
func TestRoundTrip(t *testing.T) {
	for _, tc := range goldenCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.p.AppendJSON(nil, tc.style)
			d, err := packet.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			// Invalid UTF-8 was written as \ufffd; it reads back as U+FFFD,
			// which is valid and written as itself.
			want := bytes.ReplaceAll(data, []byte(`\ufffd`), []byte("\ufffd"))
			if again := d.AppendJSON(nil, tc.style); !bytes.Equal(again, want) {
				t.Errorf("re-encoded packet differs\ngot:  %s\nwant: %s", again, want)
			}
			if !d.At.Equal(tc.p.At.Truncate(time.Millisecond)) || d.Seq != tc.p.Seq || d.Alarm() != tc.p.Alarm() {
				t.Errorf("At, Seq, Alarm = %v, %d, %v; want %v, %d, %v",
					d.At, d.Seq, d.Alarm(), tc.p.At, tc.p.Seq, tc.p.Alarm())
			}
			if len(d.Fields) != len(tc.p.Fields) {
				t.Fatalf("%d fields, want %d", len(d.Fields), len(tc.p.Fields))
			}
		})
	}
}

func TestDecodeValues(t *testing.T) {
	p := mineGas(t)
	d, err := packet.Decode(p.AppendJSON(nil, packet.Numbers))
	if err != nil {
		t.Fatal(err)
	}
	if d.IDField != "MineId" || d.SiteID != "M-07" || d.Epoch != "3" || d.GatewayID != "gw-mine-3" ||
		d.DeviceID != "gas-12" || d.DataType != "Gas" || strings.Join(d.AlarmFields, ",") != "CH4,CO" {
		t.Errorf("head decoded as %+v", d)
	}
	if _, off := d.At.In(d.Loc).Zone(); off != 8*3600 {
		t.Errorf("Loc offset %d, want +8h", off)
	}
	want := []struct {
		kind packet.Kind
		text string
	}{
		{packet.KindFloat, "1.25"}, {packet.KindInt, "31"}, {packet.KindFloat, "20.9"},
		{packet.KindFloat, "-3.5"}, {packet.KindBool, "True"}, {packet.KindString, "RUN"},
	}
	for i, w := range want {
		f := d.Fields[i]
		if f.Value.Kind() != w.kind || f.Value.String() != w.text {
			t.Errorf("%s = %v %q, want %v %q", f.Name, f.Value.Kind(), f.Value, w.kind, w.text)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	const head = `"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","Seq":1,"TS":"2020-01-01T12:00:00Z"`
	for _, in := range []string{
		``,
		`[]`,
		`{"DataBody":{}}`,
		`{"DataHead":{` + head + `}}`,
		`{"DataHead":{` + head + `},"DataBody":{},"Extra":1}`,
		`{"DataHead":{` + head + `},"DataBody":{}} {}`,
		`{"DataHead":{` + head + `},"DataBody":{"a":[1]}}`,
		`{"DataHead":{` + head + `},"DataBody":{"a":{}}}`,
		`{"DataHead":{` + head + `},"DataBody":{"a":1e999}}`,
		`{"DataHead":{` + head + `,"MineId":"x"},"DataBody":{}}`,
		`{"DataHead":{` + head + `,"Alarm":"True"},"DataBody":{}}`,
		`{"DataHead":{` + head + `,"AlarmFields":["CO"]},"DataBody":{}}`,
		`{"DataHead":{` + head + `,"Alarm":"False","AlarmFields":["CO"]},"DataBody":{}}`,
		`{"DataHead":{` + head + `,"AlarmFields":"CO","Alarm":"True"},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","Seq":1},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","TS":"2020-01-01T12:00:00Z"},"DataBody":{}}`,
		`{"DataHead":{"Time":"20:00:00","FarmId":"001","Seq":1,"TS":"2020-01-01T12:00:00Z"},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","Seq":1,"TS":"2020-01-01T12:00:00Z"},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-03","Time":"20:00:00","FarmId":"001","Seq":1,"TS":"2020-01-01T12:00:00Z"},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","Seq":-1,"TS":"2020-01-01T12:00:00Z"},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","Seq":"1","TS":"2020-01-01T12:00:00Z"},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":1,"Seq":1,"TS":"2020-01-01T12:00:00Z"},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-01","Time":"8:00","FarmId":"001","Seq":1,"TS":"2020-01-01T12:00:00Z"},"DataBody":{}}`,
		`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","Seq":1,"TS":"yesterday"},"DataBody":{}}`,
	} {
		if p, err := packet.Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%s) = %+v, want an error", in, p)
		} else if !strings.HasPrefix(err.Error(), "packet: decode: ") {
			t.Errorf("Decode(%s): error %q lacks the package prefix", in, err)
		}
	}
}

// TestHeadTimes checks Date, Time and TS against the time package's own
// formatting over the whole four-digit year range and zones with odd
// offsets and daylight saving time.
func TestHeadTimes(t *testing.T) {
	zones := []*time.Location{
		nil, time.UTC,
		mustZone(t, "Asia/Shanghai"),
		mustZone(t, "America/New_York"),
		mustZone(t, "Asia/Kathmandu"),     // +05:45
		mustZone(t, "Pacific/Chatham"),    // +12:45 / +13:45
		mustZone(t, "America/St_Johns"),   // -03:30
		mustZone(t, "Australia/Adelaide"), // +09:30 / +10:30
		time.FixedZone("odd", -(3*3600 + 17*60 + 9)),
	}
	lo := time.Date(0, 1, 2, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9999, 12, 30, 0, 0, 0, 0, time.UTC).Unix()
	instants := []time.Time{
		time.Date(2026, 3, 8, 6, 59, 59, 999999999, time.UTC), // around New York's DST change
		time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC),
		time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 500, time.UTC),
	}
	for i := int64(0); i < 2000; i++ {
		instants = append(instants, time.Unix(lo+(hi-lo)/2000*i+i*7919, i*1e6))
	}
	var buf []byte
	for _, loc := range zones {
		for _, at := range instants {
			p := packet.Packet{At: at, Loc: loc}
			buf = p.AppendJSON(buf[:0], packet.Strings)
			var got struct {
				DataHead struct{ Date, Time, TS string }
			}
			if err := json.Unmarshal(buf, &got); err != nil {
				t.Fatal(err)
			}
			l := loc
			if l == nil {
				l = time.UTC
			}
			local := at.In(l)
			h := got.DataHead
			if h.Date != local.Format("2006-01-02") || h.Time != local.Format("15:04:05") ||
				h.TS != at.UTC().Format("2006-01-02T15:04:05.000Z") {
				t.Fatalf("%v in %v: Date, Time, TS = %s %s %s", at, l, h.Date, h.Time, h.TS)
			}
		}
	}
	// Years RFC 3339 cannot express are written as the time package writes them.
	for _, at := range []time.Time{time.Date(-1, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 6, 1, 0, 0, 0, 0, time.UTC)} {
		p := packet.Packet{At: at}
		if got, want := string(p.AppendJSON(nil, packet.Strings)), `"Date":"`+at.Format("2006-01-02")+`"`; !strings.Contains(got, want) {
			t.Errorf("%s does not contain %s", got, want)
		}
	}
}

func TestValue(t *testing.T) {
	tests := []struct {
		v       packet.Value
		kind    packet.Kind
		text    string // AppendText, Strings mode without quotes
		number  string // Numbers mode
		f       float64
		numeric bool
	}{
		{packet.Value{}, packet.KindString, "", `""`, 0, false},
		{packet.String(`a"b`), packet.KindString, `a"b`, `"a\"b"`, 0, false},
		{packet.Float(25.3, -1), packet.KindFloat, "25.3", "25.3", 25.3, true},
		{packet.Float(25, 1), packet.KindFloat, "25.0", "25.0", 25, true},
		{packet.Float(2.675, 2), packet.KindFloat, "2.67", "2.67", 2.675, true}, // 2.675 is 2.67499999… in binary
		{packet.Float(1, -5), packet.KindFloat, "1", "1", 1, true},
		{packet.Float(1, 1000), packet.KindFloat, "1." + strings.Repeat("0", 127), "1." + strings.Repeat("0", 127), 1, true},
		{packet.Float(math.Copysign(0, -1), 1), packet.KindFloat, "0.0", "0.0", 0, true},
		{packet.Float(-0.04, 1), packet.KindFloat, "0.0", "0.0", -0.04, true},
		{packet.Float(-0.05001, 1), packet.KindFloat, "-0.1", "-0.1", -0.05001, true},
		{packet.Float(math.Inf(1), 2), packet.KindFloat, "+Inf", "null", math.Inf(1), true},
		{packet.Int(-4), packet.KindInt, "-4", "-4", -4, true},
		{packet.Uint(7), packet.KindUint, "7", "7", 7, true},
		{packet.Bool(true), packet.KindBool, "True", "true", 1, true},
		{packet.Bool(false), packet.KindBool, "False", "false", 0, true},
	}
	for _, tc := range tests {
		if tc.v.Kind() != tc.kind {
			t.Errorf("%v: kind %v, want %v", tc.v, tc.v.Kind(), tc.kind)
		}
		if b, err := tc.v.AppendText([]byte("x")); string(b) != "x"+tc.text || err != nil {
			t.Errorf("AppendText = %q, %v; want %q", b, err, "x"+tc.text)
		}
		if s := tc.v.String(); s != tc.text {
			t.Errorf("String = %q, want %q", s, tc.text)
		}
		f, ok := tc.v.Float64()
		if f != tc.f || ok != tc.numeric {
			t.Errorf("%v: Float64 = %v, %v; want %v, %v", tc.v, f, ok, tc.f, tc.numeric)
		}
		p := packet.Packet{Fields: []packet.Field{{"v", tc.v}}}
		want := `"v":` + tc.number + `}}`
		if got := string(p.AppendJSON(nil, packet.Numbers)); !strings.HasSuffix(got, want) {
			t.Errorf("Numbers: %s does not end with %s", got, want)
		}
	}
	if f, ok := packet.Float(math.NaN(), 1).Float64(); !math.IsNaN(f) || !ok {
		t.Errorf("NaN.Float64() = %v, %v", f, ok)
	}
	if s := packet.Kind(9).String(); s != "Kind(9)" {
		t.Errorf("Kind(9).String() = %q", s)
	}
}

func TestAlarm(t *testing.T) {
	if p := farmRain(t); p.Alarm() {
		t.Error("farm packet is an alarm")
	}
	if p := mineGas(t); !p.Alarm() {
		t.Error("gas packet is not an alarm")
	}
}

// TestAppendJSONAllocs holds AppendJSON to its promise: no allocation when
// the buffer has room.
func TestAppendJSONAllocs(t *testing.T) {
	p := bench20(t)
	buf := make([]byte, 0, 2048)
	for _, style := range []packet.ValueStyle{packet.Strings, packet.Numbers} {
		if n := testing.AllocsPerRun(100, func() { buf = p.AppendJSON(buf[:0], style) }); n != 0 {
			t.Errorf("values %v: %v allocations per packet, want 0", style, n)
		}
	}
}

// TestClockUnsynced: the mark comes after Epoch and before Alarm, only when
// set, and reads back; anything but "True" does not read.
func TestClockUnsynced(t *testing.T) {
	p := mineGas(t)
	plain := p.AppendJSON(nil, packet.Strings)
	p.ClockUnsynced = true
	p.Mono = 42 * time.Second // not encoded
	marked := p.AppendJSON(nil, packet.Strings)
	want := bytes.Replace(plain, []byte(`"Epoch":"3","Alarm"`), []byte(`"Epoch":"3","ClockUnsynced":"True","Alarm"`), 1)
	if bytes.Equal(want, plain) || !bytes.Equal(marked, want) {
		t.Fatalf("marked packet:\n got %s\nwant %s", marked, want)
	}
	d, err := packet.Decode(marked)
	if err != nil {
		t.Fatal(err)
	}
	if !d.ClockUnsynced || !bytes.Equal(d.AppendJSON(nil, packet.Strings), marked) {
		t.Fatalf("read back: ClockUnsynced %v, %s", d.ClockUnsynced, d.AppendJSON(nil, packet.Strings))
	}
	if d, err := packet.Decode(plain); err != nil || d.ClockUnsynced {
		t.Fatalf("unmarked packet read back with ClockUnsynced %v (%v)", d.ClockUnsynced, err)
	}
	bad := bytes.Replace(marked, []byte(`"ClockUnsynced":"True"`), []byte(`"ClockUnsynced":"False"`), 1)
	if _, err := packet.Decode(bad); err == nil || !strings.Contains(err.Error(), "ClockUnsynced") {
		t.Fatalf("ClockUnsynced False: %v, want an error", err)
	}
}

// TestTSMilliseconds: TS carries the reading time to the millisecond, so
// readings less than a second apart keep distinct times (InfluxDB keys a
// point by its time); Date and Time stay to the second; Decode reads both
// the millisecond form and the older one to the second.
func TestTSMilliseconds(t *testing.T) {
	p := packet.Packet{At: time.Date(2026, 11, 29, 16, 55, 22, 317_900_000, time.UTC), Loc: mustZone(t, "Asia/Shanghai"),
		SiteID: "001", DataType: "Rain", GatewayID: "gw-01", DeviceID: "rain-1", Seq: 1, Fields: []packet.Field{{"Rainfall", packet.Float(0.5, 1)}}}
	data := p.AppendJSON(nil, packet.Strings)
	var got struct {
		DataHead struct{ Date, Time, TS string }
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if h := got.DataHead; h.TS != "2026-11-29T16:55:22.317Z" || h.Date != "2026-11-30" || h.Time != "00:55:22" {
		t.Errorf("Date, Time, TS = %s %s %s; want 2026-11-30 00:55:22 2026-11-29T16:55:22.317Z", h.Date, h.Time, h.TS)
	}
	d, err := packet.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := p.At.Truncate(time.Millisecond); !d.At.Equal(want) {
		t.Errorf("decoded At %v, want %v", d.At, want)
	}
	if _, off := d.At.In(d.Loc).Zone(); off != 8*3600 {
		t.Errorf("decoded Loc offset %d, want +8h", off)
	}
	old := bytes.Replace(data, []byte(`16:55:22.317Z`), []byte(`16:55:22Z`), 1)
	for _, b := range [][]byte{data, old} { // both forms fit docs/schema/packet.schema.json
		if err := testtool.CheckPacket(b); err != nil {
			t.Errorf("schema: %v\n%s", err, b)
		}
	}
	if d, err := packet.Decode(old); err != nil || !d.At.Equal(p.At.Truncate(time.Second)) {
		t.Errorf("TS to the second: At %v, %v; want %v", d.At, err, p.At.Truncate(time.Second))
	}
}
