package emulator

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"fieldlink/sensors/profile"
)

// Faults makes a device misbehave as field devices do. Each request draws
// Drop, BadCRC and Exception from the Emulator's seeded generator, so a run
// is repeatable. The write faults (RefuseWrites, DropWriteReplies,
// WriteReplyDelay, ClampWrite) are not drawn: they hit every write (fc 5,
// 6, 15, 16) that Drop and Exception spared, so that a test of a master's
// writes knows what each write meets.
type Faults struct {
	// Drop is the share of requests left unanswered (0..1): a master sees a
	// timeout.
	Drop float64
	// BadCRC is the share of replies sent with a corrupted CRC (0..1). It
	// applies to RTU framing only; Modbus TCP has no CRC.
	BadCRC float64
	// Exception is the share of requests answered with exception 4, server
	// device failure (0..1).
	Exception float64
	// Turnaround is the slave's turnaround time Ts, added before each reply
	// on every transport (field devices take 5–60 ms).
	Turnaround time.Duration

	// RefuseWrites answers every write with exception 3, illegal data
	// value, and stores nothing: a device whose setpoints are locked.
	RefuseWrites bool
	// DropWriteReplies executes and stores every write but sends no reply:
	// the master times out not knowing that the write took effect.
	DropWriteReplies bool
	// WriteReplyDelay delays the reply to a write by this much on top of
	// Turnaround; the write itself takes effect at once. Beyond the
	// master's timeout the reply arrives late, when the master has given
	// up (and, on a serial line, may be reading the next reply).
	WriteReplyDelay time.Duration
	// ClampWrite, when set, limits holding-register writes (fc 6 and 16)
	// as a device that silently clamps a setpoint to its range does: the
	// device stores ClampWrite(addr, v) for each register written, and
	// still answers with the normal echo. See [ClampRange].
	ClampWrite func(addr, v uint16) uint16
}

// ClampRange is a [Faults.ClampWrite] that keeps every raw register value
// within lo..hi, read as unsigned.
func ClampRange(lo, hi uint16) func(addr, v uint16) uint16 {
	return func(_, v uint16) uint16 { return min(max(v, lo), hi) }
}

// Device is one emulated slave.
type Device struct {
	Slave byte // 1..247
	// Profile is the device's register map; the Emulator reads it for as
	// long as it runs, so it must not change after New.
	Profile *profile.Profile
	Faults  Faults
}

// Options tunes an Emulator. The zero value is usable.
type Options struct {
	// Now is the clock of the value models; nil means time.Now. A fixed
	// clock serves fixed values. Diurnal models peak at 15:00 in the
	// location of the times it returns.
	Now func() time.Time
	// Seed decides the values and the faults; the same seed, clock and
	// requests give the same replies.
	Seed int64
	// Logger receives connection and framing events at debug level and
	// I/O errors at warn level; nil discards them.
	Logger *slog.Logger
	// OnRequest, when set, sees every request that arrives well framed (an
	// RTU frame with a good CRC, a Modbus TCP frame of protocol 0), for any
	// slave id, broadcasts and ids not emulated included, before the device
	// acts on it: slave is the address or unit id, pdu the function code and
	// data, a copy the callee may keep. It lets a test check the bytes a
	// master put on the wire. It runs on the serving goroutine, so it must
	// return quickly; it may call the Emulator's methods.
	OnRequest func(slave byte, pdu []byte)
}

// Emulator serves emulated Modbus slaves on any number of transports at
// once. Its methods are safe for concurrent use.
type Emulator struct {
	devs      map[byte]*device
	now       func() time.Time
	log       *slog.Logger
	onRequest func(slave byte, pdu []byte)
	origin    time.Time

	mu      sync.Mutex // guards ignored, garbage and the guarded fields of every device
	ignored uint64
	garbage uint64
}

// register is a profile register with its value model.
type register struct {
	r    *profile.Register
	m    model
	text string // a string register's fixed content
	or   bool   // a bool on one bit of a shared word: OR it into the word
}

// device is the state of one emulated slave.
type device struct {
	slave  byte
	prof   *profile.Profile
	faults Faults
	regs   [5][]register // by profile.Area, sorted by address
	limit  [5]int        // per area: first address past the readable span

	// Guarded by Emulator.mu.
	rng     *rand.Rand
	written [5]map[uint16]uint16 // values written by a master, by area and address
	stats   SlaveStats
}

// New builds an Emulator for devs. It refuses duplicate or out-of-range slave
// ids, line-protocol profiles (they are not Modbus devices) and fault shares
// outside 0..1.
func New(devs []Device, opt Options) (*Emulator, error) {
	e := &Emulator{devs: map[byte]*device{}, now: opt.Now, log: opt.Logger, onRequest: opt.OnRequest}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	// Rain counters start at midnight UTC of the day the emulator starts,
	// as a gauge's total since it was powered on.
	e.origin = e.now().UTC().Truncate(24 * time.Hour)
	for i, d := range devs {
		if d.Slave < 1 || d.Slave > 247 {
			return nil, fmt.Errorf("emulator: %s: slave id %d outside 1..247", d.describe(i), d.Slave)
		}
		if other, dup := e.devs[d.Slave]; dup {
			return nil, fmt.Errorf("emulator: %s: slave id %d already taken by profile %s", d.describe(i), d.Slave, other.prof.Name)
		}
		if d.Profile == nil {
			return nil, fmt.Errorf("emulator: slave %d: no profile", d.Slave)
		}
		if d.Profile.IsLine() {
			return nil, fmt.Errorf("emulator: slave %d: profile %q is a line-protocol sensor, not a Modbus device", d.Slave, d.Profile.Name)
		}
		f := d.Faults
		for _, s := range []struct {
			name string
			v    float64
		}{{"drop", f.Drop}, {"bad CRC", f.BadCRC}, {"exception", f.Exception}} {
			if !(s.v >= 0 && s.v <= 1) {
				return nil, fmt.Errorf("emulator: slave %d: %s share %g outside 0..1", d.Slave, s.name, s.v)
			}
		}
		if f.Turnaround < 0 {
			return nil, fmt.Errorf("emulator: slave %d: negative turnaround %v", d.Slave, f.Turnaround)
		}
		if f.WriteReplyDelay < 0 {
			return nil, fmt.Errorf("emulator: slave %d: negative write reply delay %v", d.Slave, f.WriteReplyDelay)
		}
		e.devs[d.Slave] = e.newDevice(d, uint64(opt.Seed))
	}
	return e, nil
}

// describe names the i-th device of New's list by its profile, which says
// more than its position.
func (d Device) describe(i int) string {
	if d.Profile == nil {
		return fmt.Sprintf("device %d", i)
	}
	return fmt.Sprintf("device %d (profile %s)", i, d.Profile.Name)
}

func (e *Emulator) newDevice(d Device, seed uint64) *device {
	dev := &device{
		slave:  d.Slave,
		prof:   d.Profile,
		faults: d.Faults,
		rng:    rand.New(rand.NewPCG(mix(seed), mix(seed^uint64(d.Slave)<<40))),
	}
	for i := range d.Profile.Registers {
		r := &d.Profile.Registers[i]
		key := hashString(mix(seed)^uint64(d.Slave)<<56, r.Name)
		reg := register{r: r, m: newModel(r, key, e.origin), or: r.Type == profile.Bool && r.Bit != nil && !r.Area.IsBit()}
		if r.Type == profile.String {
			reg.text = stringFor(d.Profile, d.Slave, r, key)
		}
		dev.regs[r.Area] = append(dev.regs[r.Area], reg)
		if end := int(r.Address) + r.Words(); end > dev.limit[r.Area] {
			// A master may read a little past the last register, up to
			// the next multiple of 16, as many devices allow.
			dev.limit[r.Area] = ((end - 1) | 15) + 1
		}
	}
	for a := range dev.regs {
		slices.SortStableFunc(dev.regs[a], func(x, y register) int { return int(x.r.Address) - int(y.r.Address) })
	}
	return dev
}

// stringFor is the fixed text of a string register: a serial number or a
// firmware version when the name says so, else the device's model name.
func stringFor(p *profile.Profile, slave byte, r *profile.Register, key uint64) string {
	name := strings.ToLower(r.Name)
	switch {
	case strings.Contains(name, "serial"):
		return fmt.Sprintf("FL%03d%06d", slave, key%1000000)
	case strings.Contains(name, "version"), strings.Contains(name, "firmware"):
		return "1.0.0"
	}
	return p.Model
}

// SlaveStats counts what one emulated slave did.
type SlaveStats struct {
	Requests     uint64 // well-formed requests addressed to the slave
	Replies      uint64 // replies sent, exceptions and corrupted ones included
	Dropped      uint64 // requests left unanswered by the Drop or DropWriteReplies fault
	CRCCorrupted uint64 // replies sent with a deliberately wrong CRC
	Exceptions   uint64 // exception replies of any code
	Writes       uint64 // writes executed (values stored), broadcasts included
}

// Stats is a snapshot of an Emulator's counters.
type Stats struct {
	Slaves map[byte]SlaveStats
	// Ignored counts requests for a slave id not emulated, and broadcasts:
	// a real slave stays silent to both.
	Ignored uint64
	// Garbage counts RTU input discarded: bad CRC, incomplete frames, noise.
	Garbage uint64
}

// Stats returns a snapshot of the counters.
func (e *Emulator) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{Slaves: make(map[byte]SlaveStats, len(e.devs)), Ignored: e.ignored, Garbage: e.garbage}
	for id, d := range e.devs {
		s.Slaves[id] = d.stats
	}
	return s
}

// Values returns the readings slave serves at time at, by register name, as
// a master decoding them with the profile gets them (after the register's
// scale and rounding), so that a test can compare exactly. Bools are 0 or 1;
// string registers are left out. Values written by a master are included.
// It returns nil for a slave that is not emulated.
func (e *Emulator) Values(slave byte, at time.Time) map[string]float64 {
	d := e.devs[slave]
	if d == nil {
		return nil
	}
	out := make(map[string]float64, len(d.prof.Registers))
	e.mu.Lock()
	defer e.mu.Unlock()
	for a := range d.regs {
		for i := range d.regs[a] {
			r := d.regs[a][i].r
			switch {
			case r.Type == profile.String:
				continue
			case r.Area.IsBit():
				if d.bits(r.Area, int(r.Address), 1, at)[0]&1 != 0 {
					out[r.Name] = 1
				} else {
					out[r.Name] = 0
				}
			default:
				v, ok := r.Decode(d.words(r.Area, int(r.Address), r.Words(), at)).Float64()
				if ok {
					out[r.Name] = v
				}
			}
		}
	}
	return out
}

// Written returns the raw value a master last wrote to addr in area of
// slave (a coil as 0 or 1), after any ClampWrite; ok is false when nothing
// was written there or the slave is not emulated.
func (e *Emulator) Written(slave byte, area profile.Area, addr uint16) (v uint16, ok bool) {
	d := e.devs[slave]
	if d == nil {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok = d.written[area][addr]
	return v, ok
}

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
		area, maxQty, want := profile.Holding, 123, 2*qty
		if fc == 15 {
			area, maxQty, want = profile.Coil, 1968, (qty+7)/8
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
	var tmp [2 * 125]byte
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

// Slaves returns one device for each named profile of set, as slaves 1,
// 2, …: the usual bench of a test or a demo.
func Slaves(set profile.Set, names ...string) ([]Device, error) {
	devs := make([]Device, len(names))
	for i, n := range names {
		p, ok := set[n]
		if !ok {
			return nil, fmt.Errorf("emulator: no profile %q", n)
		}
		devs[i] = Device{Slave: byte(i + 1), Profile: p}
	}
	return devs, nil
}
