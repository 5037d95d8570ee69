package firmwareprofiles_test

import (
	"strings"
	"testing"

	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/profile"
)

// A broken profile is refused with errors that name the file, the line and
// the field, so that whoever wrote it can go straight to the mistake.
func TestBrokenProfiles(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		line  int
		field string
		msg   string
	}{
		{"bad area", `model: m
data_type: Gas
registers:
  - name: CH4
    area: holdng
`, 5, "registers[0].area", "unknown area"},
		{"unknown key", `model: m
data_type: Gas
registers:
  - name: CH4
    area: holding
    scal: 0.01
`, 6, "registers[0].scal", `did you mean "scale"`},
		{"duplicate register", `model: m
data_type: Gas
registers:
  - name: CH4
    area: holding
  - name: CH4
    area: holding
    address: 1
`, 6, "registers[1].name", "duplicate register name"},
		{"register in a hole", `model: m
data_type: Weather
holes:
  - {area: input, from: 4, to: 199}
registers:
  - name: WindSpeed
    area: input
    address: 2
    type: uint32
  - name: WindDirection
    area: input
    address: 198
    type: uint32
`, 12, "registers[1].address", "lies in holes[0]"},
		{"alarm on a bool", `model: m
data_type: Gas
registers:
  - name: Fault
    area: coil
    alarm: {above: 1}
`, 6, "registers[0].alarm", "numeric type"},
		{"regex group missing", `model: m
data_type: Wind
line:
  regex: '^\$WIMWV,(?P<dir>\d+),R'
  fields:
    - {name: WindSpeed, group: speed}
`, 6, "line.fields[0].group", `no group named "speed"`},
		{"missing data_type", `model: m
registers:
  - {name: CO, area: holding}
`, 1, "data_type", "missing required field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := profile.Parse("broken", "firmware-profiles/broken.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			es, ok := yamlconf.IsErrors(err)
			if !ok {
				t.Fatalf("error %v carries no positions", err)
			}
			found := false
			for _, e := range es {
				if e.Field == tt.field {
					found = true
					if e.File != "firmware-profiles/broken.yaml" || e.Line != tt.line || !strings.Contains(e.Msg, tt.msg) {
						t.Errorf("got %v; want file firmware-profiles/broken.yaml, line %d, message with %q", e, tt.line, tt.msg)
					}
				}
			}
			if !found {
				t.Errorf("no error for field %s in:\n%v", tt.field, err)
			}
			// The text a user sees has all three.
			for _, s := range []string{"firmware-profiles/broken.yaml:", tt.field + ":"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q lacks %q", err, s)
				}
			}
		})
	}
}
