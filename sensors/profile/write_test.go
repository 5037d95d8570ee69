package profile

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func f64(v float64) *float64 { return &v }

func ord(o Order) *Order { return &o }

// Every value is written as the device expects it, byte for byte, or
// refused: never truncated, clamped or skipped.
func TestWriteRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		reg  Register
		v    float64
		fc   byte
		qty  uint16
		data string // hex; "" means refused
	}{
		{"coil true", Register{Area: Coil, Type: Bool, Write: &Write{}}, 1, 5, 1, "ff00"},
		{"coil false is written, as 0000", Register{Area: Coil, Type: Bool, Write: &Write{}}, 0, 5, 1, "0000"},
		{"coil by fc15", Register{Area: Coil, Type: Bool, Write: &Write{Function: 15}}, 1, 15, 1, "01"},
		{"coil 2 refused", Register{Area: Coil, Type: Bool, Write: &Write{}}, 2, 0, 0, ""},
		{"scale 0.1: 5.1 is raw 51", Register{Area: Holding, Type: Uint16, Scale: f64(0.1), Write: &Write{}}, 5.1, 6, 1, "0033"},
		{"scale 0.1: 5.15 refused", Register{Area: Holding, Type: Uint16, Scale: f64(0.1), Write: &Write{}}, 5.15, 0, 0, ""},
		{"offset", Register{Area: Holding, Type: Int16, Scale: f64(0.1), Offset: -40, Write: &Write{}}, -40, 6, 1, "0000"},
		{"int16 negative", Register{Area: Holding, Type: Int16, Write: &Write{}}, -2, 6, 1, "fffe"},
		{"int16 over range refused", Register{Area: Holding, Type: Int16, Write: &Write{}}, 32768, 0, 0, ""},
		{"uint16 negative refused", Register{Area: Holding, Type: Uint16, Write: &Write{}}, -1, 0, 0, ""},
		{"uint16 by fc16", Register{Area: Holding, Type: Uint16, Write: &Write{Function: 16}}, 1, 16, 1, "0001"},
		{"int32 CDAB", Register{Area: Holding, Type: Int32, Order: CDAB, Write: &Write{}}, 0x01020304, 16, 2, "03040102"},
		{"int32 read ABCD, written CDAB", Register{Area: Holding, Type: Int32, Write: &Write{Order: ord(CDAB)}}, -2, 16, 2, "fffeffff"},
		{"float32 ABCD", Register{Area: Holding, Type: Float32, Write: &Write{}}, 42.5, 16, 2, "422a0000"},
		{"float32 BADC", Register{Area: Holding, Type: Float32, Order: BADC, Write: &Write{}}, 42.5, 16, 2, "2a420000"},
		{"float32 DCBA", Register{Area: Holding, Type: Float32, Order: DCBA, Write: &Write{}}, 42.5, 16, 2, "00002a42"},
		{"float32 overflow refused", Register{Area: Holding, Type: Float32, Write: &Write{}}, 1e39, 0, 0, ""},
		{"uint32 max", Register{Area: Holding, Type: Uint32, Write: &Write{}}, 4294967295, 16, 2, "ffffffff"},
		{"uint32 over refused", Register{Area: Holding, Type: Uint32, Write: &Write{}}, 4294967296, 0, 0, ""},
		{"holding bool", Register{Area: Holding, Type: Bool, Write: &Write{}}, 1, 6, 1, "0001"},
		{"holding bool BADC", Register{Area: Holding, Type: Bool, Order: BADC, Write: &Write{}}, 1, 6, 1, "0100"},
		{"half-even on a tie of the binary fraction", Register{Area: Holding, Type: Uint16, Scale: f64(0.5), Write: &Write{}}, 2.5, 6, 1, "0005"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, qty, data, err := tc.reg.WriteRequest(tc.v)
			if tc.data == "" {
				if err == nil || !errors.Is(err, ErrNotWritable) {
					t.Fatalf("wrote fc %d %x, want refused with ErrNotWritable (err %v)", fc, data, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%x", data); fc != tc.fc || qty != tc.qty || got != tc.data {
				t.Fatalf("fc %d qty %d data %s, want fc %d qty %d data %s", fc, qty, got, tc.fc, tc.qty, tc.data)
			}
			if tc.reg.Area == Holding && tc.reg.Write.Order == nil {
				// What is written decodes back to the value.
				if v, ok := tc.reg.Decode(data).Float64(); tc.reg.Type != Bool && (!ok || math.Abs(v-tc.v) > 1e-9) {
					t.Errorf("decodes back to %v, want %v", v, tc.v)
				}
			}
		})
	}
}

// A profile cannot make a register writable that Modbus or safety forbids.
func TestWriteSpecValidation(t *testing.T) {
	for _, tc := range []struct{ reg, want string }{
		{"{name: R, area: holding, safety: true, write: {}}", "safety register can never be written"},
		{"{name: R, area: input, write: {}}", "read-only in Modbus"},
		{"{name: R, area: holding, type: bool, bit: 3, write: {}}", "one bit of a shared register"},
		{"{name: R, area: holding, type: string, length: 2, write: {}}", "strings cannot be written"},
		{"{name: R, area: holding, type: float32, write: {function: 6}}", "function 6 cannot write a float32"},
		{"{name: R, area: coil, write: {function: 16}}", "function 16 cannot write"},
		{"{name: R, area: holding, write: {order: XYZW}}", "unknown order"},
	} {
		src := "model: M\ndata_type: T\nregisters:\n  - " + tc.reg + "\n"
		_, err := Parse("p", "p.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to say %q", tc.reg, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "p.yaml:4") {
			t.Errorf("%s: err %v does not name the file and line", tc.reg, err)
		}
	}
	p, err := Parse("p", "p.yaml", []byte("model: M\ndata_type: T\nregisters:\n  - {name: R, area: holding, type: int32, write: {order: CDAB}}\n  - {name: S, area: holding, safety: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Registers[0].Writable() || p.Registers[1].Writable() || p.Registers[0].WriteFunction() != 16 {
		t.Errorf("writable %v %v, function %d", p.Registers[0].Writable(), p.Registers[1].Writable(), p.Registers[0].WriteFunction())
	}
}
