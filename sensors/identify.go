package sensors

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode"

	gm "github.com/goburrow/modbus"

	"fieldlink/internal/words"
	"fieldlink/packet"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/plan"
	"fieldlink/sensors/profile"
)

// Confidence is how sure [Identify] is of a profile.
type Confidence uint8

// Confidences, least sure first.
const (
	// Guess: the profile's registers answer, but some hold values it says
	// they cannot, or some are silent; or the device named another.
	Guess Confidence = iota + 1
	// Possible: every register of the profile answers with a value it
	// can hold, but another profile's fit the values as well or better.
	Possible
	// Likely: every register answers with a value the profile says it can
	// hold, and no other profile fits as many non-zero values; or the device
	// named the profile's model (Read Device Identification), not its
	// vendor.
	Likely
	// Sure: the device named the profile's vendor and model, and every
	// register of the profile answers with a value it can hold.
	Sure
)

func (c Confidence) String() string {
	return [...]string{"none", "guess", "possible", "likely", "sure"}[c]
}

// Match is a profile a device may run, and how sure.
type Match struct {
	Profile    *profile.Profile
	Confidence Confidence
	// Why says what the confidence rests on.
	Why string
	// Registers is how many of the profile's registers answered.
	Registers int
	// Plausible is how many of them hold a value the profile says they
	// can; Telling is how many 16-bit words of those are not zero (a bit
	// set counts one): the values that tell profiles apart, as a device
	// answers zeros past its own map and a 32-bit value that decodes
	// plausibly says more than a 16-bit one.
	Plausible, Telling int
}

// fits reports whether every register of m's profile answered with a
// plausible value.
func (m Match) fits() bool {
	return m.Registers == len(m.Profile.Registers) && m.Plausible == m.Registers
}

// Identity is what Identify learnt of a slave.
type Identity struct {
	// ID is the device's answer to Read Device Identification; nil when
	// it does not implement it.
	ID modbus.DeviceID
	// Matches are the profiles whose registers answer without an
	// exception, best first.
	Matches []Match
}

// Identifier is the part of a Modbus client Identify uses.
type Identifier interface {
	Reader
	ReadDeviceID(ctx context.Context, slave byte) (modbus.DeviceID, error)
}

// Identify asks slave what it is (function 43/14, where the device
// answers it) and reads the registers of every Modbus profile of set, to
// rank the profiles it may run by how well the values fit what each
// profile says its registers hold: many devices answer addresses past
// their own map, so that registers answering says little, and what they
// hold tells a weather sensor from a rain gauge. A profile whose reads
// answer with an exception, or none of whose registers answer, is left
// out.
func Identify(ctx context.Context, c Identifier, slave byte, set profile.Set) (Identity, error) {
	var id Identity
	if d, err := c.ReadDeviceID(ctx, slave); err == nil {
		id.ID = d
	} else if ctx.Err() != nil {
		return id, ctx.Err()
	}
	named := map[*profile.Profile]bool{}
	for _, name := range set.Names() {
		p := set[name]
		if p.IsLine() || len(p.Registers) == 0 {
			continue
		}
		m, refused, err := score(ctx, c, slave, p)
		if ctx.Err() != nil {
			return id, ctx.Err()
		}
		if err != nil {
			return id, err
		}
		if refused || m.Registers == 0 {
			continue
		}
		named[p] = id.ID != nil && sameModel(id.ID, p.Model)
		id.Matches = append(id.Matches, m)
	}
	// Best first: a device that named its model, then profiles whose every
	// register holds a plausible value, then those fitting more non-zero
	// words, fewer implausible values, more registers.
	better := func(a, b Match) int {
		switch {
		case named[a.Profile] != named[b.Profile]:
			return bit(named[a.Profile]) - bit(named[b.Profile])
		case a.fits() != b.fits():
			return bit(a.fits()) - bit(b.fits())
		case a.Telling != b.Telling:
			return a.Telling - b.Telling
		case a.Registers-a.Plausible != b.Registers-b.Plausible:
			return (b.Registers - b.Plausible) - (a.Registers - a.Plausible)
		}
		return a.Registers - b.Registers
	}
	sort.SliceStable(id.Matches, func(i, j int) bool { return better(id.Matches[i], id.Matches[j]) > 0 })
	anyNamed := slices.ContainsFunc(id.Matches, func(m Match) bool { return named[m.Profile] })
	for i := range id.Matches {
		m := &id.Matches[i]
		n, all := m.Registers, len(m.Profile.Registers)
		// Registers that read zero tell nothing (a device answers zeros
		// past its own map), so a profile with more of them fits no better.
		tied := 0
		for j, o := range id.Matches {
			if j != i && o.fits() && !named[o.Profile] && o.Telling >= m.Telling {
				tied++
			}
		}
		switch {
		case named[m.Profile] && m.fits() && sameVendor(id.ID.Vendor(), m.Profile.Manufacturer):
			m.Confidence, m.Why = Sure, fmt.Sprintf("the device names its vendor %q and model %q, and all %d registers hold plausible values", id.ID.Vendor(), productOf(id.ID), n)
		case named[m.Profile]:
			m.Confidence, m.Why = Likely, fmt.Sprintf("the device names model %q; %d of %d registers hold plausible values", productOf(id.ID), m.Plausible, all)
		case m.fits() && !anyNamed && tied == 0:
			m.Confidence, m.Why = Likely, fmt.Sprintf("all %d registers hold plausible values, %s of them not zero; no other profile fits as many", n, words.Count(m.Telling, "word"))
		case m.fits() && !anyNamed:
			m.Confidence, m.Why = Possible, fmt.Sprintf("all %d registers hold plausible values, %s of them not zero; %s fit as well or better", n, words.Count(m.Telling, "word"), words.Count(tied, "other profile"))
		case m.fits():
			m.Confidence, m.Why = Guess, fmt.Sprintf("all %d registers hold plausible values, but the device names another model", n)
		default:
			m.Confidence, m.Why = Guess, fmt.Sprintf("%d of %d registers answer, %d with plausible values", n, all, m.Plausible)
		}
	}
	return id, nil
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// productOf is the product code the device gave, else its model name.
func productOf(d modbus.DeviceID) string {
	if p := d.Product(); p != "" {
		return p
	}
	return d.Model()
}

// score reads p's registers from slave by p's own request plan and
// counts those that answer, those whose values are plausible and the
// non-zero words of those. refused is a read answered with an exception: the device
// does not have the profile's layout. A silence counts as not answering,
// a broken link is an error.
func score(ctx context.Context, c Identifier, slave byte, p *profile.Profile) (m Match, refused bool, err error) {
	m.Profile = p
	reqs, err := PlanDevice(p, -1, plan.Cost{})
	if err != nil {
		return m, false, err
	}
	for _, r := range reqs {
		b, err := c.Read(ctx, slave, r.Area.FunctionCode(), r.Start, r.Count)
		var mbErr *gm.ModbusError
		switch {
		case errors.Is(err, modbus.ErrClosed):
			return m, false, err
		case errors.As(err, &mbErr):
			return m, true, nil
		case err != nil:
			continue
		}
		for _, ref := range r.Refs {
			reg := &p.Registers[ref]
			ok, telling := plausible(reg, b, int(reg.Address)-int(r.Start))
			m.Registers++
			if ok {
				m.Plausible++
				m.Telling += telling
			}
		}
	}
	return m, false, nil
}

// plausible reports whether the register at offset off (registers or
// bits) of a read's bytes holds a value the profile says it can, and how
// many of its words are not zero. The range is the register's
// emulate min..max (a counter has no top), stretched to its alarm
// thresholds and then by its width on each side, since the field strays
// past what the emulator models; a register without one takes any value
// of its type but NaN. A whole-register bool is 0 or 1.
func plausible(r *profile.Register, b []byte, off int) (ok bool, telling int) {
	if r.Area.IsBit() {
		if off < 0 || off/8 >= len(b) {
			return false, 0
		}
		return true, int(b[off/8] >> (off % 8) & 1)
	}
	lo, hi := 2*off, 2*(off+r.Words())
	if off < 0 || hi > len(b) {
		return false, 0
	}
	w := b[lo:hi]
	for k := 0; k < len(w); k += 2 {
		if w[k] != 0 || w[k+1] != 0 {
			telling++
		}
	}
	switch r.Type {
	case profile.Bool:
		if r.Bit != nil {
			return true, telling
		}
		raw := binary.BigEndian.Uint16(w)
		if r.Order == profile.BADC || r.Order == profile.DCBA {
			raw = raw>>8 | raw<<8
		}
		return raw <= 1, telling
	case profile.String:
		return true, telling
	}
	i, u, f, kind := r.Raw(w)
	switch kind {
	case packet.KindInt:
		f = float64(i)
	case packet.KindUint:
		f = float64(u)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return false, telling
	}
	v := f*r.ScaleOr1() + r.Offset
	e := r.Emulate
	if e == nil {
		return true, telling
	}
	min, max := e.Min, e.Max
	if a := r.Alarm; a != nil {
		if a.Above != nil {
			max = math.Max(max, *a.Above)
		}
		if a.Below != nil {
			min = math.Min(min, *a.Below)
		}
	}
	width := max - min
	if width == 0 {
		width = math.Max(1, math.Abs(max))
	}
	if e.Counter {
		max = math.Inf(1)
	}
	return v >= min-width && v <= max+width, telling
}

// fields splits s into lower-case runs of letters and digits.
func fields(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// squash is s in lower case without anything but letters and digits.
func squash(s string) string { return strings.Join(fields(s), "") }

// sameVendor reports whether a device's vendor name and a profile's
// manufacturer share a word of four letters or more.
func sameVendor(vendor, manufacturer string) bool {
	for _, a := range fields(vendor) {
		for _, b := range fields(manufacturer) {
			if len(a) >= 4 && a == b {
				return true
			}
		}
	}
	return false
}

// sameModel reports whether the product code or model name a device gave
// is the profile's model: its text up to the first parenthesis, compared
// without case, spaces or dashes.
func sameModel(d modbus.DeviceID, model string) bool {
	head, _, _ := strings.Cut(model, " (")
	want := squash(head)
	if len(want) < 4 {
		return false
	}
	for _, got := range []string{d.Product(), d[modbus.ObjectModelName], d[modbus.ObjectProductName]} {
		if g := squash(got); len(g) >= 4 && (g == want || strings.HasPrefix(g, want) || strings.HasPrefix(want, g)) {
			return true
		}
	}
	return false
}
