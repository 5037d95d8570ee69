// Package profile is the firmware-profile model: one YAML file per sensor
// model that says which registers to read and how to turn their raw words
// into measurements, or, for serial ASCII sensors, how to parse their lines.
//
// Profiles are embedded in the binary (firmware-profiles/) and may be
// extended or overridden by files in a site's profiles_dir. A profile is
// validated once when loaded; after that, decoding cannot fail on a
// well-formed frame.
package profile

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"fieldlink/sensors/modbus/spec"
)

// Area is a Modbus data table.
type Area uint8

// The four Modbus data tables.
const (
	Holding  Area = iota + 1 // holding registers, read with function 3
	Input                    // input registers, function 4
	Coil                     // coils, function 1
	Discrete                 // discrete inputs, function 2
)

var areaNames = []string{Holding: "holding", Input: "input", Coil: "coil", Discrete: "discrete"}

func (a Area) String() string {
	if int(a) < len(areaNames) && a > 0 {
		return areaNames[a]
	}
	return fmt.Sprintf("area(%d)", uint8(a))
}

// UnmarshalText accepts holding, input, coil or discrete.
func (a *Area) UnmarshalText(b []byte) error {
	for i, n := range areaNames {
		if i > 0 && n == string(b) {
			*a = Area(i)
			return nil
		}
	}
	return fmt.Errorf("unknown area %q (valid: holding, input, coil, discrete)", b)
}

// IsBit reports whether the area holds single bits rather than 16-bit words.
func (a Area) IsBit() bool { return a == Coil || a == Discrete }

// FunctionCode is the Modbus read function for the area.
func (a Area) FunctionCode() byte {
	switch a {
	case Coil:
		return 1
	case Discrete:
		return 2
	case Holding:
		return 3
	case Input:
		return 4
	}
	return 0
}

// Type is how the raw words of a register are interpreted.
type Type uint8

// Value types. Multi-register types take Order into account.
const (
	Int16 Type = iota + 1
	Uint16
	Int32
	Uint32
	Int64
	Uint64
	Float32
	Float64
	Bool
	String
)

var typeNames = []string{Int16: "int16", Uint16: "uint16", Int32: "int32", Uint32: "uint32",
	Int64: "int64", Uint64: "uint64", Float32: "float32", Float64: "float64", Bool: "bool", String: "string"}

func (t Type) String() string {
	if int(t) < len(typeNames) && t > 0 {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// UnmarshalText accepts the type names listed in typeNames.
func (t *Type) UnmarshalText(b []byte) error {
	for i, n := range typeNames {
		if i > 0 && n == string(b) {
			*t = Type(i)
			return nil
		}
	}
	return fmt.Errorf("unknown type %q (valid: %s)", b, strings.Join(typeNames[1:], ", "))
}

// Words is how many 16-bit registers a value of this type occupies; 0 for
// String, whose length is configured.
func (t Type) Words() int {
	switch t {
	case Int16, Uint16, Bool:
		return 1
	case Int32, Uint32, Float32:
		return 2
	case Int64, Uint64, Float64:
		return 4
	}
	return 0
}

// Order is the byte order of a multi-register value, named by where the
// bytes A (most significant) to D land on the wire: ABCD is big-endian words
// in big-endian order, CDAB swaps the words, BADC swaps the bytes in each
// word, DCBA is fully little-endian. For 64-bit values the same rule extends
// to eight bytes (ABCD = ABCDEFGH, CDAB = GHEFCDAB, ...).
type Order uint8

// Byte orders.
const (
	ABCD Order = iota
	CDAB
	BADC
	DCBA
)

var orderNames = []string{ABCD: "ABCD", CDAB: "CDAB", BADC: "BADC", DCBA: "DCBA"}

func (o Order) String() string {
	if int(o) < len(orderNames) {
		return orderNames[o]
	}
	return fmt.Sprintf("order(%d)", uint8(o))
}

// UnmarshalText accepts ABCD, CDAB, BADC or DCBA; there are no aliases.
func (o *Order) UnmarshalText(b []byte) error {
	for i, n := range orderNames {
		if n == string(b) {
			*o = Order(i)
			return nil
		}
	}
	return fmt.Errorf("unknown order %q (valid: ABCD, CDAB, BADC, DCBA)", b)
}

// Alarm thresholds; a value above Above or below Below alarms the packet.
// Equality counts: a CH4 alarm at 1.0 % fires at exactly 1.0.
type Alarm struct {
	Above *float64 `yaml:"above"`
	Below *float64 `yaml:"below"`
}

// String says the thresholds: "above 1.5 and below 0.2", "none" for a
// nil alarm or one without thresholds.
func (a *Alarm) String() string {
	var s []string
	if a != nil && a.Above != nil {
		s = append(s, fmt.Sprintf("above %g", *a.Above))
	}
	if a != nil && a.Below != nil {
		s = append(s, fmt.Sprintf("below %g", *a.Below))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " and ")
}

// Fires reports whether v is past a threshold.
func (a *Alarm) Fires(v float64) bool {
	if a == nil {
		return false
	}
	return (a.Above != nil && v >= *a.Above) || (a.Below != nil && v <= *a.Below)
}

// Emulate tells the emulator how a measurement behaves in the field. It has
// no effect on a real gateway.
type Emulate struct {
	// Model is one of: diurnal (daily swing, peak mid-afternoon), gust (mean
	// wind with gusts), rain (dry spells and showers; a counter if Counter),
	// drift (slow drift with rare spikes, for gases), walk (bounded random
	// walk), constant, angle (0–360 wrapping walk).
	Model string `yaml:"model"`
	// Min and Max bound the value; for the rain model they bound the shower
	// intensity in mm/h, whether or not Counter accumulates it.
	Min float64 `yaml:"min"`
	Max float64 `yaml:"max"`
	// Spike is the chance per minute of a short excursion towards Max (gas
	// alarms); 0 means never.
	Spike float64 `yaml:"spike"`
	// Counter makes a rain model accumulate instead of reporting a rate.
	Counter bool `yaml:"counter"`
}

// Register is one measurement read from a device.
type Register struct {
	Name    string `yaml:"name,required"`
	Area    Area   `yaml:"area,required"`
	Address uint16 `yaml:"address"` // zero-based (the "40001" of a manual is address 0)
	Type    Type   `yaml:"type"`    // default uint16, or bool in a bit area
	Order   Order  `yaml:"order"`   // default ABCD
	// Length is the number of registers of a string (two ASCII bytes each).
	Length int `yaml:"length"`
	// Bit picks one bit (0 = least significant) of a 16-bit register for a
	// bool; nil means the whole register (non-zero is true).
	Bit *uint8 `yaml:"bit"`
	// Scale and Offset map the raw value: value = raw·scale + offset.
	// Scale defaults to 1.
	Scale  *float64 `yaml:"scale"`
	Offset float64  `yaml:"offset"`
	Unit   string   `yaml:"unit"`
	// Precision is the number of digits after the point in the packet;
	// nil means as many as needed.
	Precision *int     `yaml:"precision"`
	Alarm     *Alarm   `yaml:"alarm"`
	Emulate   *Emulate `yaml:"emulate"`
	// Description is free text for people.
	Description string `yaml:"description"`
	// Write makes the register writable by a command, when a site allows
	// it for a device; nil means read-only.
	Write *Write `yaml:"write"`
	// Safety marks a register that belongs to a safety function (a
	// methane power cut-off relay, its lockout): it can never be written,
	// whatever a site file says.
	Safety bool `yaml:"safety"`
}

// Write says how a register is written. Devices may take writes in
// another word order than they answer reads in.
type Write struct {
	// Function is 5 or 15 for a coil, 6 or 16 for a holding register;
	// default 5 for a coil, 6 for one register, 16 for more.
	Function byte `yaml:"function"`
	// Order of the written words; default the register's read order.
	Order *Order `yaml:"order"`
}

// Writable reports whether a command may write the register at all.
func (r *Register) Writable() bool { return r.Write != nil && !r.Safety }

// WriteFunction is the Modbus function that writes the register.
func (r *Register) WriteFunction() byte {
	switch {
	case r.Write != nil && r.Write.Function != 0:
		return r.Write.Function
	case r.Area == Coil:
		return 5
	case r.Words() == 1:
		return 6
	}
	return 16
}

// Words is the number of 16-bit registers (or bits, in a bit area) the
// register occupies.
func (r *Register) Words() int {
	if r.Area.IsBit() {
		return 1
	}
	if r.Type == String {
		return r.Length
	}
	return r.Type.Words()
}

// ScaleOr1 returns the configured scale, 1 when unset.
func (r *Register) ScaleOr1() float64 {
	if r.Scale == nil {
		return 1
	}
	return *r.Scale
}

// Hole is a range of addresses that a device refuses to read (often answering
// exception 2): a merged read must never cross it.
type Hole struct {
	Area Area   `yaml:"area,required"`
	From uint16 `yaml:"from"`
	To   uint16 `yaml:"to"` // inclusive
}

// Serial is a device's factory-default line settings, used by scan and init
// and checked against the bus settings.
type Serial struct {
	Baud     int    `yaml:"baud"`
	Parity   string `yaml:"parity"` // N, E or O
	DataBits int    `yaml:"data_bits"`
	StopBits int    `yaml:"stop_bits"`
}

// Limits are a device's own request limits, when below the protocol's.
type Limits struct {
	MaxRegisters int `yaml:"max_registers"` // per read, ≤ 125
	MaxBits      int `yaml:"max_bits"`      // per read, ≤ 2000
}

// LineField is one value taken from a line of text.
type LineField struct {
	Name string `yaml:"name,required"`
	// Group names a regex capture group; Index is a 0-based field position
	// after splitting on Delimiter. Exactly one of them is used, per the
	// profile's mode.
	Group     string   `yaml:"group"`
	Index     *int     `yaml:"index"`
	Type      string   `yaml:"type"` // number (default), string, bool
	Scale     *float64 `yaml:"scale"`
	Offset    float64  `yaml:"offset"`
	Unit      string   `yaml:"unit"`
	Precision *int     `yaml:"precision"`
	Alarm     *Alarm   `yaml:"alarm"`
	// True lists the texts that mean true for a bool field (default "1",
	// "true", "True", "A" — NMEA's valid flag).
	True []string `yaml:"true"`
	// Emulate is how the emulator varies this field.
	Emulate *Emulate `yaml:"emulate"`
}

// Line describes a serial sensor that prints one reading per line.
type Line struct {
	// Regex with named groups, matched against each line (after Checksum).
	Regex string `yaml:"regex"`
	// Delimiter splits the line into fields for Index-based fields.
	Delimiter string `yaml:"delimiter"`
	// Match: lines not containing it (e.g. "$WIMWV") are ignored.
	Match string `yaml:"match"`
	// Checksum: "nmea" verifies and strips a *hh NMEA 0183 checksum.
	Checksum string      `yaml:"checksum"`
	Fields   []LineField `yaml:"fields,required"`
	// Emit is the emulator's template for a line: {Name} stands for a
	// field's value; with checksum nmea, "*hh" is appended.
	Emit string `yaml:"emit"`

	re *regexp.Regexp
}

// Re is the compiled Regex (nil when the profile uses Delimiter).
func (l *Line) Re() *regexp.Regexp { return l.re }

// Profile is one sensor model's map.
type Profile struct {
	// Name is the file name without .yaml; devices refer to it.
	Name         string `yaml:"-"`
	Model        string `yaml:"model,required"`
	Manufacturer string `yaml:"manufacturer"`
	Description  string `yaml:"description"`
	// Follows names the public document the register map was taken from.
	Follows string `yaml:"follows"`
	// DataType is the packet's DataType unless the device overrides it.
	DataType  string     `yaml:"data_type,required"`
	Serial    *Serial    `yaml:"serial"`
	Limits    Limits     `yaml:"limits"`
	Holes     []Hole     `yaml:"holes"`
	Registers []Register `yaml:"registers"`
	Line      *Line      `yaml:"line"`
	// Interval is a sensible default poll interval for this model.
	Interval time.Duration `yaml:"interval"`

	// Source is where the profile was loaded from, for messages.
	Source string `yaml:"-"`
}

// IsLine reports whether the profile is for a line-protocol serial sensor.
func (p *Profile) IsLine() bool { return p.Line != nil }

// MaxRegisters is the largest register read the device accepts.
func (p *Profile) MaxRegisters() int {
	if p.Limits.MaxRegisters > 0 {
		return p.Limits.MaxRegisters
	}
	return spec.MaxReadRegisters
}

// MaxBits is the largest coil/discrete read the device accepts.
func (p *Profile) MaxBits() int {
	if p.Limits.MaxBits > 0 {
		return p.Limits.MaxBits
	}
	return spec.MaxReadBits
}

// Register returns the register with the given name.
func (p *Profile) Register(name string) (*Register, bool) {
	for i := range p.Registers {
		if p.Registers[i].Name == name {
			return &p.Registers[i], true
		}
	}
	return nil, false
}
