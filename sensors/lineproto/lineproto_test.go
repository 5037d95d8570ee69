package lineproto_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"fieldlink/packet"
	"fieldlink/sensors/lineproto"
	"fieldlink/sensors/profile"
)

// nmeaYAML is a WIMWV wind sentence profile, as the Gill WindSonic sends it.
const nmeaYAML = `
model: test NMEA anemometer
data_type: Wind
line:
  match: "MWV,"
  checksum: nmea
  regex: '^\$(?:WI|II)MWV,(?P<dir>\d{1,3}(?:\.\d*)?)?,[RT],(?P<speed>\d+(?:\.\d*)?)?,M,(?P<status>[AV])$'
  emit: "$WIMWV,{WindDirection},R,{WindSpeed},M,{WindValid}"
  fields:
    - {name: WindDirection, group: dir, precision: 0}
    - {name: WindSpeed, group: speed, precision: 2, alarm: {above: 20}}
    - {name: WindValid, group: status, type: bool, true: ["A"]}
`

// polarYAML is the Gill WindSonic's default comma-separated output.
const polarYAML = `
model: test polar anemometer
data_type: Wind
line:
  delimiter: ","
  match: "Q,"
  emit: "\x02Q,{WindDirection},{WindSpeed},M,00,\x03"
  fields:
    - {name: WindDirection, index: 1, precision: 0}
    - {name: WindSpeed, index: 2, precision: 2}
    - {name: WindStatus, index: 4, type: string}
`

// gasYAML is a made-up semicolon-separated gas monitor with scaled values
// and alarms both ways, to exercise scale, offset and alarm marking.
const gasYAML = `
model: test gas monitor
data_type: Gas
line:
  delimiter: ";"
  match: "GAS;"
  emit: "GAS;{CH4};{O2};{CO};{Temperature};{Fault}"
  fields:
    - {name: CH4, index: 1, scale: 0.01, alarm: {above: 1.0}}
    - {name: O2, index: 2, scale: 0.1, precision: 1, alarm: {below: 18}}
    - {name: CO, index: 3, alarm: {above: 24}}
    - {name: Temperature, index: 4, scale: 0.1, offset: -40, precision: 1}
    - {name: Fault, index: 5, type: bool, alarm: {above: 1}}
`

func mustLine(t testing.TB, name, src string) *profile.Line {
	t.Helper()
	p, err := profile.Parse(name, name+".yaml", []byte(src))
	if err != nil {
		t.Fatalf("profile %s: %v", name, err)
	}
	return p.Line
}

// body renders fields as Name=Text pairs, the way the packet shows them.
func body(fields []packet.Field) string {
	s := make([]string, len(fields))
	for i, f := range fields {
		s[i] = f.Name + "=" + f.Value.String()
	}
	return strings.Join(s, " ")
}

func TestChecksumKnownSentence(t *testing.T) {
	// The GGA example sentence found in every NMEA 0183 reference.
	const gga = "$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47"
	if got := lineproto.Checksum(gga[1 : len(gga)-3]); got != 0x47 {
		t.Errorf("Checksum = %02X, want 47", got)
	}
	if got := lineproto.AppendChecksum(gga[:len(gga)-3]); got != gga {
		t.Errorf("AppendChecksum = %q, want %q", got, gga)
	}
	body, err := lineproto.VerifyChecksum(gga)
	if err != nil || body != gga[:len(gga)-3] {
		t.Errorf("VerifyChecksum = %q, %v", body, err)
	}
}

func TestParse(t *testing.T) {
	nmea := mustLine(t, "nmea", nmeaYAML)
	polar := mustLine(t, "polar", polarYAML)
	gas := mustLine(t, "gas", gasYAML)
	tests := []struct {
		name    string
		l       *profile.Line
		line    string
		ok      bool
		body    string   // fields as Name=Text
		alarmed []string // names
		err     error    // errors.Is target, when an error is expected
		errHas  []string // texts the error message must contain
	}{
		{name: "nmea good", l: nmea, line: "$WIMWV,120,R,002.10,M,A*0E",
			ok: true, body: "WindDirection=120 WindSpeed=2.10 WindValid=True"},
		{name: "nmea II talker, CRLF", l: nmea, line: "$IIMWV,120,R,002.10,M,A*10\r\n",
			ok: true, body: "WindDirection=120 WindSpeed=2.10 WindValid=True"},
		{name: "nmea lower-case hex", l: nmea, line: "$WIMWV,120,R,002.10,M,A*0e",
			ok: true, body: "WindDirection=120 WindSpeed=2.10 WindValid=True"},
		{name: "nmea noise before $", l: nmea, line: "\x00\xff$WIMWV,120,R,002.10,M,A*0E",
			ok: true, body: "WindDirection=120 WindSpeed=2.10 WindValid=True"},
		{name: "nmea void", l: nmea, line: "$WIMWV,229,R,002.74,M,V*11",
			ok: true, body: "WindDirection=229 WindSpeed=2.74 WindValid=False"},
		{name: "nmea calm: empty direction left out", l: nmea, line: "$WIMWV,,R,000.04,M,A*3A",
			ok: true, body: "WindSpeed=0.04 WindValid=True"},
		{name: "nmea alarm", l: nmea, line: lineproto.AppendChecksum("$WIMWV,300,R,020.00,M,A"),
			ok: true, body: "WindDirection=300 WindSpeed=20.00 WindValid=True", alarmed: []string{"WindSpeed"}},
		{name: "nmea bad checksum", l: nmea, line: "$WIMWV,120,R,002.10,M,A*0F",
			err: lineproto.ErrChecksum, errHas: []string{"0F", "0E", "$WIMWV,120"}},
		{name: "nmea missing checksum", l: nmea, line: "$WIMWV,120,R,002.10,M,A",
			err: lineproto.ErrChecksum, errHas: []string{"no *hh"}},
		{name: "nmea garbled checksum", l: nmea, line: "$WIMWV,120,R,002.10,M,A*G1",
			err: lineproto.ErrChecksum, errHas: []string{`"G1"`}},
		{name: "nmea knots do not match", l: nmea, line: "$WIMWV,229,R,002.74,N,A*05",
			err: lineproto.ErrNoMatch, errHas: []string{"002.74,N"}},
		{name: "nmea other sentence ignored", l: nmea,
			line: "$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47"},
		{name: "nmea empty line ignored", l: nmea, line: ""},

		{name: "polar good", l: polar, line: "\x02Q,229,002.74,M,00,\x0316",
			ok: true, body: "WindDirection=229 WindSpeed=2.74 WindStatus=00"},
		{name: "polar calm", l: polar, line: "\x02Q,,000.04,M,00,\x033C\r",
			ok: true, body: "WindSpeed=0.04 WindStatus=00"},
		{name: "polar bad number names field and text", l: polar, line: "\x02Q,2x9,002.74,M,00,\x0316",
			errHas: []string{"WindDirection", `"2x9"`}},
		{name: "polar hex float refused", l: polar, line: "\x02Q,0x1p3,002.74,M,00,\x0316",
			errHas: []string{"WindDirection", `"0x1p3"`}},
		{name: "polar NaN refused", l: polar, line: "\x02Q,NaN,002.74,M,00,\x0316",
			errHas: []string{"WindDirection", `"NaN"`}},
		{name: "polar short line names field", l: polar, line: "\x02Q,229,002.74",
			errHas: []string{"WindStatus", "index 4", "3 fields"}},
		{name: "polar other line ignored", l: polar, line: "WindSonic booting"},

		{name: "gas scaled, no alarm", l: gas, line: "GAS;85;209;3;652;0",
			ok: true, body: "CH4=0.85 O2=20.9 CO=3 Temperature=25.2 Fault=False"},
		{name: "gas alarms at thresholds", l: gas, line: "GAS;100;180;24;652;1",
			ok: true, body: "CH4=1.00 O2=18.0 CO=24 Temperature=25.2 Fault=True",
			alarmed: []string{"CH4", "O2", "CO", "Fault"}},
		{name: "gas just inside limits", l: gas, line: "GAS;99;181;23.9;400;false",
			ok: true, body: "CH4=0.99 O2=18.1 CO=23.9 Temperature=0.0 Fault=False"},
		{name: "gas spaces around values", l: gas, line: "GAS; 12 ; 205 ;0; 700 ;0",
			ok: true, body: "CH4=0.12 O2=20.5 CO=0 Temperature=30.0 Fault=False"},
		{name: "gas bad CO", l: gas, line: "GAS;85;209;--3;652;0",
			errHas: []string{"field CO", `"--3"`}},
		{name: "gas overflow", l: gas, line: "GAS;1e400;209;3;652;0",
			errHas: []string{"field CH4", `"1e400"`, "out of range"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fields, alarmed, ok, err := lineproto.Parse(tt.l, tt.line)
			wantErr := tt.err != nil || len(tt.errHas) > 0
			if wantErr {
				if err == nil {
					t.Fatalf("no error; fields %s", body(fields))
				}
				if tt.err != nil && !errors.Is(err, tt.err) {
					t.Errorf("error %v is not %v", err, tt.err)
				}
				for _, s := range tt.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if ok || fields != nil {
					t.Errorf("ok=%v fields=%v with an error", ok, fields)
				}
				return
			}
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if got := body(fields); got != tt.body {
				t.Errorf("fields = %s\n  want   %s", got, tt.body)
			}
			if !slices.Equal(alarmed, tt.alarmed) {
				t.Errorf("alarmed = %v, want %v", alarmed, tt.alarmed)
			}
		})
	}
}

func TestFieldErrorUnwraps(t *testing.T) {
	gas := mustLine(t, "gas", gasYAML)
	_, _, _, err := lineproto.Parse(gas, "GAS;x;209;3;652;0")
	var fe *lineproto.FieldError
	if !errors.As(err, &fe) || fe.Field != "CH4" || fe.Text != "x" {
		t.Fatalf("error %v: want a FieldError for CH4 with text x", err)
	}
}

func TestEmit(t *testing.T) {
	nmea := mustLine(t, "nmea", nmeaYAML)
	polar := mustLine(t, "polar", polarYAML)
	gas := mustLine(t, "gas", gasYAML)
	tests := []struct {
		l      *profile.Line
		values map[string]float64
		want   string
	}{
		{nmea, map[string]float64{"WindDirection": 120, "WindSpeed": 2.1, "WindValid": 1}, "$WIMWV,120,R,2.10,M,A*0E"},
		{nmea, map[string]float64{"WindDirection": 229.6, "WindSpeed": 2.744, "WindValid": 0}, "$WIMWV,230,R,2.74,M,V*19"},
		{nmea, map[string]float64{"WindSpeed": 0.04, "WindValid": 1}, "$WIMWV,,R,0.04,M,A*3A"},
		{polar, map[string]float64{"WindDirection": 229, "WindSpeed": 2.74}, "\x02Q,229,2.74,M,00,\x03"},
		{gas, map[string]float64{"CH4": 0.85, "O2": 20.9, "CO": 3, "Temperature": 25.2, "Fault": 0}, "GAS;85;209;3;652;0"},
		{gas, map[string]float64{"CH4": 1.2, "O2": 17.5, "CO": 30, "Temperature": -1.5, "Fault": 1}, "GAS;120;175;30;385;1"},
	}
	for _, tt := range tests {
		got := lineproto.Emit(tt.l, tt.values)
		if got != tt.want {
			t.Errorf("Emit(%v) = %q, want %q", tt.values, got, tt.want)
		}
		// The checksum appended must be the one VerifyChecksum accepts.
		if tt.l.Checksum == "nmea" {
			if _, err := lineproto.VerifyChecksum(got); err != nil {
				t.Errorf("Emit output %q: %v", got, err)
			}
		}
	}
}

func TestEmitWithoutTemplate(t *testing.T) {
	l := mustLine(t, "bare", "model: m\ndata_type: Wind\nline: {delimiter: \",\", fields: [{name: A, index: 0}]}\n")
	if got := lineproto.Emit(l, map[string]float64{"A": 1}); got != "" {
		t.Errorf("Emit = %q, want empty", got)
	}
}

func TestEmitParseRoundTrip(t *testing.T) {
	cases := []struct {
		yaml   string
		values []map[string]float64
	}{
		{nmeaYAML, []map[string]float64{
			{"WindDirection": 0, "WindSpeed": 0, "WindValid": 1},
			{"WindDirection": 359, "WindSpeed": 32.41, "WindValid": 0},
			{"WindDirection": 181, "WindSpeed": 19.99, "WindValid": 1},
		}},
		{polarYAML, []map[string]float64{
			{"WindDirection": 5, "WindSpeed": 0.05},
			{"WindDirection": 270, "WindSpeed": 12.5},
		}},
		{gasYAML, []map[string]float64{
			{"CH4": 0, "O2": 20.9, "CO": 0, "Temperature": -40, "Fault": 0},
			{"CH4": 1.37, "O2": 16.2, "CO": 118, "Temperature": 41.7, "Fault": 1},
		}},
	}
	for i, c := range cases {
		l := mustLine(t, fmt.Sprint("p", i), c.yaml)
		for _, values := range c.values {
			line := lineproto.Emit(l, values)
			fields, _, ok, err := lineproto.Parse(l, line)
			if err != nil || !ok {
				t.Fatalf("Parse(Emit(%v) = %q) = ok %v, %v", values, line, ok, err)
			}
			for _, f := range fields {
				want, has := values[f.Name]
				if !has {
					continue // string fields come from the template
				}
				got, _ := f.Value.Float64()
				if d := got - want; d > 1e-9 || d < -1e-9 {
					t.Errorf("%q: %s = %v, want %v", line, f.Name, got, want)
				}
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	profiles := []*profile.Line{
		mustLine(f, "nmea", nmeaYAML),
		mustLine(f, "polar", polarYAML),
		mustLine(f, "gas", gasYAML),
	}
	for _, s := range []string{
		"$WIMWV,120,R,002.10,M,A*0E",
		"$WIMWV,,R,000.04,M,A*3A",
		"$WIMWV,120,R,002.10,M,A*",
		"$*00",
		"$WIMWV*",
		"\x02Q,229,002.74,M,00,\x0316",
		"Q,,,,,,,,,",
		"GAS;85;209;3;652;0",
		"GAS;1e308;1e308;-1e308;1e308;A",
		"GAS;",
		"",
		"\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		for _, l := range profiles {
			fields, alarmed, ok, err := lineproto.Parse(l, line)
			if err != nil {
				if ok || fields != nil || alarmed != nil {
					t.Fatalf("%q: error %v with results", line, err)
				}
				continue
			}
			if !ok {
				if fields != nil || alarmed != nil {
					t.Fatalf("%q: ignored line with results", line)
				}
				continue
			}
			if len(fields) > len(l.Fields) {
				t.Fatalf("%q: %d fields from a profile of %d", line, len(fields), len(l.Fields))
			}
			names := map[string]bool{}
			for _, fl := range fields {
				names[fl.Name] = true
			}
			for _, a := range alarmed {
				if !names[a] {
					t.Fatalf("%q: alarmed %q is not among the fields", line, a)
				}
			}
		}
	})
}
