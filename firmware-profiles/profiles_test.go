package firmwareprofiles_test

import (
	"fmt"
	"io/fs"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/sensors/lineproto"
	"fieldlink/sensors/profile"
)

// loadSet loads the embedded profiles once for all tests; none modifies
// them.
var loadSet = sync.OnceValues(func() (profile.Set, error) {
	return profile.Load(firmwareprofiles.FS, "")
})

func load(t *testing.T) profile.Set {
	t.Helper()
	set, err := loadSet()
	if err != nil {
		t.Fatalf("embedded profiles do not load:\n%v", err)
	}
	return set
}

func TestEmbeddedProfilesLoad(t *testing.T) {
	set := load(t)
	files, err := fs.Glob(firmwareprofiles.FS, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != len(files) {
		t.Errorf("%d profiles from %d files", len(set), len(files))
	}
	var modbus, nmea, delim int
	for _, p := range set {
		switch {
		case !p.IsLine():
			modbus++
		case p.Line.Checksum == "nmea":
			nmea++
		case p.Line.Delimiter != "":
			delim++
		}
	}
	if modbus < 10 {
		t.Errorf("%d Modbus profiles, want at least 10", modbus)
	}
	if nmea < 1 || delim < 1 {
		t.Errorf("line profiles: %d NMEA, %d delimiter-based; want at least one of each", nmea, delim)
	}
	// The README's example refers to this one by name.
	if _, ok := set["generic-wind-speed"]; !ok {
		t.Error("no generic-wind-speed profile")
	}
}

var fileName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

func TestNames(t *testing.T) {
	set := load(t)
	seen := map[string]string{}
	for _, name := range set.Names() {
		p := set[name]
		if !fileName.MatchString(name) {
			t.Errorf("%s: file name must be lower-case words joined by hyphens", p.Source)
		}
		if other, dup := seen[strings.ToLower(name)]; dup {
			t.Errorf("%s and %s differ only in case", name, other)
		}
		seen[strings.ToLower(name)] = name
		// A map that follows no specific document says so, and its name
		// says so too.
		generic := strings.HasPrefix(strings.ToLower(p.Follows), "generic")
		if generic != strings.HasPrefix(name, "generic-") {
			t.Errorf("%s: follows %q: a generic map is named generic-..., and only a generic one", name, p.Follows)
		}
		fieldNames := map[string]bool{}
		for _, n := range measurementNames(p) {
			if fieldNames[n] {
				t.Errorf("%s: measurement %s twice", name, n)
			}
			fieldNames[n] = true
			if n == "" || n[0] < 'A' || n[0] > 'Z' {
				if n != "isRain" { // the platform's own spelling
					t.Errorf("%s: measurement %q is not CamelCase", name, n)
				}
			}
		}
	}
}

func measurementNames(p *profile.Profile) []string {
	var names []string
	for _, r := range p.Registers {
		names = append(names, r.Name)
	}
	if p.Line != nil {
		for _, f := range p.Line.Fields {
			names = append(names, f.Name)
		}
	}
	return names
}

var dataTypes = []string{"Wind", "Rain", "Gas", "Weather", "Soil", "Light", "Irrigation"}

// The gateway is never part of a mine's safety function: every register of
// a mine profile that is a cut-off relay, its lockout or its setting is
// marked safety, and nothing marked safety is writable.
func TestMineSafetyRegistersAreNeverWritable(t *testing.T) {
	safety := regexp.MustCompile(`(?i)relay|lockout|cut-?off|breaker`)
	seen := 0
	for name, p := range load(t) {
		for _, r := range p.Registers {
			if strings.HasPrefix(name, "generic-mine-") && safety.MatchString(r.Name) {
				seen++
				if !r.Safety {
					t.Errorf("%s: %s is part of the safety function but not marked safety: true", name, r.Name)
				}
			}
			if r.Safety && r.Writable() {
				t.Errorf("%s: %s is safety and writable", name, r.Name)
			}
		}
	}
	if seen == 0 {
		t.Error("no mine profile has a cut-off relay or lockout register: the rule checks nothing")
	}
}

func TestMetadata(t *testing.T) {
	for name, p := range load(t) {
		for field, v := range map[string]string{
			"model": p.Model, "manufacturer": p.Manufacturer,
			"description": p.Description, "follows": p.Follows,
		} {
			if strings.TrimSpace(v) == "" {
				t.Errorf("%s: %s is empty", name, field)
			}
		}
		if !slices.Contains(dataTypes, p.DataType) {
			t.Errorf("%s: data_type %q (want one of %v)", name, p.DataType, dataTypes)
		}
		if p.Interval <= 0 {
			t.Errorf("%s: no default interval", name)
		}
		if p.Serial == nil && !strings.Contains(p.Description, "serial settings") {
			t.Errorf("%s: no serial block, and the description does not say why", name)
		}
		for _, r := range p.Registers {
			numeric := r.Type != profile.Bool && r.Type != profile.String
			if numeric && r.Emulate == nil {
				t.Errorf("%s: register %s has no emulate block", name, r.Name)
			}
		}
		if p.Line != nil {
			if p.Line.Emit == "" {
				t.Errorf("%s: line profile without an emit template", name)
			}
			for _, f := range p.Line.Fields {
				if f.Type == "number" && f.Emulate == nil {
					t.Errorf("%s: field %s has no emulate block", name, f.Name)
				}
			}
		}
	}
}

// testValues are the values a register is checked with: the emulator's
// range and its middle, on the register's raw grid for integer types.
func testValues(r *profile.Register) []float64 {
	e := r.Emulate
	vs := []float64{e.Min, e.Max, (e.Min + e.Max) / 2, e.Min + (e.Max-e.Min)/3}
	if r.Type == profile.Float32 || r.Type == profile.Float64 {
		return vs
	}
	for i, v := range vs {
		raw := math.Round((v - r.Offset) / r.ScaleOr1())
		vs[i] = raw*r.ScaleOr1() + r.Offset
	}
	return vs
}

// precisionOf is the number of decimals the packet shows for r.
func precisionOf(r *profile.Register) int {
	if r.Precision != nil {
		return *r.Precision
	}
	d := 0
	if r.Scale != nil {
		s := strconv.FormatFloat(*r.Scale, 'f', -1, 64)
		if i := strings.IndexByte(s, '.'); i >= 0 {
			d = len(s) - i - 1
		}
	}
	return d
}

// Every numeric register gives back, to its precision, what was written
// into it: scale, offset, type and byte order agree, and the emulator's
// range fits the register (a value that does not fit is clamped and fails).
func TestModbusRoundTrip(t *testing.T) {
	for name, p := range load(t) {
		for i := range p.Registers {
			r := &p.Registers[i]
			if r.Type == profile.Bool || r.Type == profile.String || r.Emulate == nil {
				continue
			}
			buf := make([]byte, 2*r.Words())
			prec := precisionOf(r)
			for _, v := range testValues(r) {
				r.Encode(buf, v)
				got := r.Decode(buf)
				want := strconv.FormatFloat(v, 'f', prec, 64)
				if f, _ := strconv.ParseFloat(want, 64); f == 0 {
					want = strings.TrimPrefix(want, "-") // the packet never writes -0
				}
				if got.String() != want {
					t.Errorf("%s: %s: wrote %v, read %s, want %s", name, r.Name, v, got, want)
				}
			}
		}
	}
}

func TestBoolRegistersRoundTrip(t *testing.T) {
	for name, p := range load(t) {
		for i := range p.Registers {
			r := &p.Registers[i]
			if r.Type != profile.Bool {
				continue
			}
			buf := make([]byte, 2*r.Words())
			for _, v := range []bool{false, true} {
				x := 0.0
				if v {
					x = 1
				}
				r.Encode(buf, x)
				if got := r.Decode(buf).String(); got != map[bool]string{false: "False", true: "True"}[v] {
					t.Errorf("%s: %s: wrote %v, read %s", name, r.Name, v, got)
				}
			}
		}
	}
}

// Safety thresholds: every gas profile can raise an alarm, and the mine
// gases use the thresholds of the Coal Mine Safety Regulations.
func TestGasAlarms(t *testing.T) {
	above := func(v float64) *profile.Alarm { return &profile.Alarm{Above: &v} }
	below := func(v float64) *profile.Alarm { return &profile.Alarm{Below: &v} }
	want := map[string]*profile.Alarm{
		"CH4": above(1.0), "CO": above(24), "O2": below(18), "H2S": above(6.6), "CO2": above(5000),
	}
	for name, p := range load(t) {
		n := 0
		for i := range p.Registers {
			r := &p.Registers[i]
			if r.Alarm == nil {
				continue
			}
			n++
			if w, ok := want[r.Name]; ok && fmt.Sprint(deref(r.Alarm)) != fmt.Sprint(deref(w)) {
				t.Errorf("%s: %s alarm %v, want %v", name, r.Name, deref(r.Alarm), deref(w))
			}
			if !strings.Contains(r.Description, "alarm") {
				t.Errorf("%s: %s: the description should say where the threshold comes from", name, r.Name)
			}
			// The threshold itself fires (equality counts), through the
			// register's own encoding.
			buf := make([]byte, 2*r.Words())
			th, step := r.Alarm.Above, r.ScaleOr1()
			if th == nil {
				th, step = r.Alarm.Below, -step
			}
			r.Encode(buf, *th)
			if !r.Alarmed(r.Decode(buf)) {
				t.Errorf("%s: %s at its threshold %v does not alarm", name, r.Name, *th)
			}
			if r.Type == profile.Float32 || r.Type == profile.Float64 {
				step /= 100
			}
			r.Encode(buf, *th-step)
			if r.Alarmed(r.Decode(buf)) {
				t.Errorf("%s: %s one step short of %v alarms", name, r.Name, *th)
			}
		}
		if p.DataType == "Gas" && n == 0 {
			t.Errorf("%s: a gas profile without any alarm", name)
		}
	}
}

func deref(a *profile.Alarm) [2]string {
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(*p, 'g', -1, 64)
	}
	return [2]string{f(a.Above), f(a.Below)}
}

func TestHolesAndLimitsShown(t *testing.T) {
	var holes, limits int
	for _, p := range load(t) {
		if len(p.Holes) > 0 {
			holes++
		}
		if p.Limits.MaxRegisters > 0 {
			limits++
			if p.MaxRegisters() >= 125 {
				t.Errorf("%s: limits.max_registers %d is no limit", p.Name, p.Limits.MaxRegisters)
			}
		}
	}
	if holes == 0 || limits == 0 {
		t.Errorf("%d profiles with holes, %d with limits; want at least one each", holes, limits)
	}
}

// The emulator's lines parse back into the values they were made from.
func TestLineProfilesRoundTrip(t *testing.T) {
	for name, p := range load(t) {
		if !p.IsLine() {
			continue
		}
		values := map[string]float64{}
		for _, f := range p.Line.Fields {
			if f.Emulate != nil {
				values[f.Name] = (f.Emulate.Min + f.Emulate.Max) / 2
			}
		}
		line := lineproto.Emit(p.Line, values)
		fields, _, ok, err := lineproto.Parse(p.Line, line)
		if err != nil || !ok {
			t.Errorf("%s: Parse(Emit) of %q: ok=%v, %v", name, line, ok, err)
			continue
		}
		for _, f := range fields {
			want, has := values[f.Name]
			if !has {
				continue
			}
			prec := 0
			for _, lf := range p.Line.Fields {
				if lf.Name == f.Name && lf.Precision != nil {
					prec = *lf.Precision
				}
			}
			if got := f.Value.String(); got != strconv.FormatFloat(want, 'f', prec, 64) {
				t.Errorf("%s: %q: %s = %s, want %v", name, line, f.Name, got, want)
			}
		}
	}
}
