package emulator

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"fieldlink/sensors/profile"
)

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
