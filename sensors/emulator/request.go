package emulator

import (
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"fieldlink/sensors/modbus/spec"
	"fieldlink/sensors/profile"
)

// reply is what a device does with one request.
type reply struct {
	pdu    []byte        // nil: stay silent
	badCRC bool          // corrupt the reply's CRC
	wait   time.Duration // turnaround before the reply
}

// handle runs one request PDU for slave; crc tells whether the transport
// has a CRC that the BadCRC fault can corrupt.
func (e *Emulator) handle(slave byte, pdu []byte, crc bool) reply {
	if e.onRequest != nil {
		e.onRequest(slave, slices.Clone(pdu))
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if slave == 0 {
		// Broadcast: every device executes writes, none replies.
		e.ignored++
		for _, d := range e.devs {
			if isWrite(pdu) {
				d.execute(pdu, now)
			}
		}
		return reply{}
	}
	d := e.devs[slave]
	if d == nil || len(pdu) == 0 {
		e.ignored++
		return reply{}
	}
	d.stats.Requests++
	// Draw all three every time, so the sequence of one fault does not
	// depend on the shares of the others.
	drop, exc, bad := d.rng.Float64(), d.rng.Float64(), d.rng.Float64()
	if drop < d.faults.Drop {
		d.stats.Dropped++
		return reply{}
	}
	var out []byte
	if exc < d.faults.Exception {
		out = exception(pdu[0], excServerFailure)
	} else {
		out = d.execute(pdu, now)
	}
	r := reply{pdu: out, wait: d.faults.Turnaround}
	if isWrite(pdu) && out[0]&0x80 == 0 {
		if d.faults.DropWriteReplies {
			d.stats.Dropped++
			return reply{}
		}
		r.wait += d.faults.WriteReplyDelay
	}
	d.stats.Replies++
	if out[0]&0x80 != 0 {
		d.stats.Exceptions++
	}
	if crc && bad < d.faults.BadCRC {
		r.badCRC = true
		d.stats.CRCCorrupted++
	}
	return r
}

// Modbus exception codes.
const (
	excIllegalFunction = 1
	excIllegalAddress  = 2
	excIllegalValue    = 3
	excServerFailure   = 4
)

func exception(fc, code byte) []byte { return []byte{fc | 0x80, code} }

func isWrite(pdu []byte) bool {
	return len(pdu) > 0 && (pdu[0] == 5 || pdu[0] == 6 || pdu[0] == 15 || pdu[0] == 16)
}

// execute runs a request with the write faults applied: a refused write
// is not processed at all. The caller holds Emulator.mu.
func (d *device) execute(pdu []byte, now time.Time) []byte {
	if !isWrite(pdu) {
		return d.process(pdu, now)
	}
	if d.faults.RefuseWrites {
		return exception(pdu[0], excIllegalValue)
	}
	out := d.process(pdu, now)
	if out[0]&0x80 == 0 {
		d.stats.Writes++
	}
	return out
}

var readArea = [...]profile.Area{1: profile.Coil, 2: profile.Discrete, 3: profile.Holding, 4: profile.Input}

// process answers a request PDU as the device's register map says. The
// caller holds Emulator.mu.
func (d *device) process(pdu []byte, now time.Time) []byte {
	fc := pdu[0]
	be := binary.BigEndian
	switch fc {
	case 1, 2, 3, 4:
		if len(pdu) != 5 {
			return exception(fc, excIllegalValue)
		}
		area := readArea[fc]
		start, qty := int(be.Uint16(pdu[1:])), int(be.Uint16(pdu[3:]))
		maxQty := d.prof.MaxRegisters()
		if area.IsBit() {
			maxQty = d.prof.MaxBits()
		}
		if code := d.check(area, start, qty, maxQty); code != 0 {
			return exception(fc, code)
		}
		if area.IsBit() {
			b := d.bits(area, start, qty, now)
			return append([]byte{fc, byte(len(b))}, b...)
		}
		w := d.words(area, start, qty, now)
		return append([]byte{fc, byte(len(w))}, w...)
	case 5, 6:
		if len(pdu) != 5 {
			return exception(fc, excIllegalValue)
		}
		addr, v := int(be.Uint16(pdu[1:])), be.Uint16(pdu[3:])
		area := profile.Holding
		if fc == 5 {
			area = profile.Coil
			if v != 0xFF00 && v != 0 {
				return exception(fc, excIllegalValue)
			}
			v >>= 15 // 0xFF00 → 1
		}
		if code := d.check(area, addr, 1, 1); code != 0 {
			return exception(fc, code)
		}
		d.write(area, addr, v)
		return slices.Clone(pdu)
	case 15, 16:
		if len(pdu) < 6 {
			return exception(fc, excIllegalValue)
		}
		start, qty, n := int(be.Uint16(pdu[1:])), int(be.Uint16(pdu[3:])), int(pdu[5])
		area, maxQty, want := profile.Holding, spec.MaxWriteRegisters, 2*qty
		if fc == 15 {
			area, maxQty, want = profile.Coil, spec.MaxWriteBits, (qty+7)/8
		}
		if qty < 1 || qty > maxQty || n != want || len(pdu) != 6+n {
			return exception(fc, excIllegalValue)
		}
		if code := d.check(area, start, qty, maxQty); code != 0 {
			return exception(fc, code)
		}
		data := pdu[6:]
		for i := range qty {
			if fc == 15 {
				d.write(area, start+i, uint16(data[i/8]>>(i%8)&1))
			} else {
				d.write(area, start+i, be.Uint16(data[2*i:]))
			}
		}
		return slices.Clone(pdu[:5])
	case 43:
		return d.identify(pdu)
	}
	return exception(fc, excIllegalFunction)
}

// identify answers Read Device Identification (43/14) for a profile that
// names its manufacturer: vendor name, product code (the model up to its
// first parenthesis) and revision, plus the model name in the regular
// category. A generic profile's device does not implement it.
func (d *device) identify(pdu []byte) []byte {
	p := d.prof
	if p.Manufacturer == "" || p.Manufacturer == "generic" {
		return exception(43, excIllegalFunction)
	}
	if len(pdu) != 4 || pdu[1] != 0x0E {
		return exception(43, excIllegalValue)
	}
	code, from := pdu[2], pdu[3]
	product, _, _ := strings.Cut(p.Model, " (")
	objects := [][]byte{0: []byte(p.Manufacturer), 1: []byte(product), 2: []byte("V1.0")}
	switch code {
	case 1: // basic
	case 2: // regular
		objects = append(objects, nil, nil, []byte(p.Model))
	default:
		return exception(43, excIllegalValue)
	}
	if int(from) >= len(objects) {
		from = 0
	}
	out := []byte{43, 0x0E, code, 0x82, 0, 0, 0}
	n := 0
	for id := int(from); id < len(objects); id++ {
		if objects[id] == nil {
			continue
		}
		out = append(out, byte(id), byte(len(objects[id])))
		out = append(out, objects[id]...)
		n++
	}
	out[6] = byte(n)
	return out
}

// check validates a request for qty items from start in area and returns
// the exception code to answer, or 0.
func (d *device) check(area profile.Area, start, qty, maxQty int) byte {
	if len(d.regs[area]) == 0 {
		return excIllegalFunction // the device has no such table
	}
	if qty < 1 || qty > maxQty {
		return excIllegalValue
	}
	end := start + qty - 1
	if end >= d.limit[area] {
		return excIllegalAddress
	}
	for _, h := range d.prof.Holes {
		if h.Area == area && int(h.From) <= end && start <= int(h.To) {
			return excIllegalAddress
		}
	}
	return 0
}

func (d *device) write(area profile.Area, addr int, v uint16) {
	if area == profile.Holding && d.faults.ClampWrite != nil {
		v = d.faults.ClampWrite(uint16(addr), v)
	}
	if d.written[area] == nil {
		d.written[area] = map[uint16]uint16{}
	}
	d.written[area][uint16(addr)] = v
}
