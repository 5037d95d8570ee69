package emulator

import (
	"encoding/binary"
	"time"

	"fieldlink/sensors/modbus/spec"
	"fieldlink/sensors/profile"
)

// value is register g's reading at t, as the number to encode.
func (g *register) value(t time.Time) float64 {
	v := g.m.value(t)
	if g.r.Type == profile.Bool {
		if v >= 0.5 {
			return 1
		}
		return 0
	}
	return v
}

// words returns the wire bytes of qty registers from start in a word area:
// every register overlapping the range encoded at t, 0 where none is
// mapped, then what a master wrote on top. The caller holds Emulator.mu.
func (d *device) words(area profile.Area, start, qty int, t time.Time) []byte {
	out := make([]byte, 2*qty)
	var tmp [2 * spec.MaxReadRegisters]byte // the longest register (a string) a profile maps
	for i := range d.regs[area] {
		g := &d.regs[area][i]
		a, n := int(g.r.Address), g.r.Words()
		if a+n <= start || a >= start+qty {
			continue
		}
		b := tmp[:2*n]
		if g.r.Type == profile.String {
			g.r.EncodeString(b, g.text)
		} else {
			g.r.Encode(b, g.value(t))
		}
		for k := range n {
			j := a + k - start
			if j < 0 || j >= qty {
				continue
			}
			if g.or {
				out[2*j] |= b[2*k]
				out[2*j+1] |= b[2*k+1]
			} else {
				out[2*j], out[2*j+1] = b[2*k], b[2*k+1]
			}
		}
	}
	if w := d.written[area]; len(w) > 0 {
		for j := range qty {
			if v, ok := w[uint16(start+j)]; ok {
				binary.BigEndian.PutUint16(out[2*j:], v)
			}
		}
	}
	return out
}

// bits returns qty bits from start in a bit area, packed as on the wire
// (first bit in the least significant bit of the first byte). The caller
// holds Emulator.mu.
func (d *device) bits(area profile.Area, start, qty int, t time.Time) []byte {
	out := make([]byte, (qty+7)/8)
	set := func(j int, on bool) {
		if on {
			out[j/8] |= 1 << (j % 8)
		} else {
			out[j/8] &^= 1 << (j % 8)
		}
	}
	for i := range d.regs[area] {
		g := &d.regs[area][i]
		j := int(g.r.Address) - start
		if j >= 0 && j < qty {
			set(j, g.value(t) != 0)
		}
	}
	if w := d.written[area]; len(w) > 0 {
		for j := range qty {
			if v, ok := w[uint16(start+j)]; ok {
				set(j, v != 0)
			}
		}
	}
	return out
}
