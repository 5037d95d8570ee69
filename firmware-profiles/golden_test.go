package firmwareprofiles_test

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"fieldlink/internal/testtool"
	"fieldlink/sensors/lineproto"
	"fieldlink/sensors/profile"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestGolden renders, for every profile, what the gateway makes of a
// reading in the middle of each emulated range: the Modbus wire bytes and
// the packet text, or the emitted line and its fields. Any change to a
// profile that changes what reaches the platform shows up as a diff of
// testdata/<name>.golden; run with -update after checking it.
func TestGolden(t *testing.T) {
	for name, p := range load(t) {
		t.Run(name, func(t *testing.T) {
			testtool.Golden(t, filepath.Join("testdata", name+".golden"), render(p), *update)
		})
	}
}

func render(p *profile.Profile) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s: %s, %s\n", p.Name, p.Model, p.DataType)
	if p.IsLine() {
		values := map[string]float64{}
		for _, f := range p.Line.Fields {
			if f.Emulate != nil {
				values[f.Name] = (f.Emulate.Min + f.Emulate.Max) / 2
			}
		}
		line := lineproto.Emit(p.Line, values)
		fmt.Fprintf(&b, "line %q\n", line)
		fields, alarmed, ok, err := lineproto.Parse(p.Line, line)
		fmt.Fprintf(&b, "ok=%v err=%v alarmed=%v\n", ok, err, alarmed)
		for _, f := range fields {
			fmt.Fprintf(&b, "%s=%s\n", f.Name, f.Value)
		}
		return b.Bytes()
	}
	for i := range p.Registers {
		r := &p.Registers[i]
		v := 1.0 // bools: set
		if r.Emulate != nil {
			v = (r.Emulate.Min + r.Emulate.Max) / 2
			if r.Type != profile.Float32 && r.Type != profile.Float64 {
				v = math.Round((v-r.Offset)/r.ScaleOr1())*r.ScaleOr1() + r.Offset
			}
		}
		buf := make([]byte, 2*r.Words())
		r.Encode(buf, v)
		val := r.Decode(buf)
		fmt.Fprintf(&b, "%s %s@%d %s %s: % x -> %s=%s %s alarm=%v\n",
			r.Name, r.Area, r.Address, r.Type, r.Order, buf, r.Name, val, r.Unit, r.Alarmed(val))
	}
	return b.Bytes()
}
