package profile

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"fieldlink/internal/serialline"
	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/modbus/spec"
)

// Set is the profiles a gateway knows, by name.
type Set map[string]*Profile

// Names returns the profile names in order.
func (s Set) Names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Parse decodes and validates one profile file; name is its file name
// without extension and source where it came from (for messages).
func Parse(name, source string, data []byte) (*Profile, error) {
	p := &Profile{Name: name, Source: source}
	doc, err := yamlconf.Decode(source, data, p)
	if doc.Broken() {
		return nil, err
	}
	p.validate(doc)
	if err := doc.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

// Load reads every *.yaml profile in fsys (the embedded firmware-profiles),
// then every *.yaml in dir, if dir is not empty; a file in dir overrides an
// embedded profile of the same name. All errors of all files are returned
// together.
func Load(fsys fs.FS, dir string) (Set, error) {
	set := Set{}
	var errs []error
	if fsys != nil {
		names, err := fs.Glob(fsys, "*.yaml")
		if err != nil {
			return nil, err
		}
		for _, f := range names {
			data, err := fs.ReadFile(fsys, f)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			name := strings.TrimSuffix(path.Base(f), ".yaml")
			p, err := Parse(name, "firmware-profiles/"+f, data)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			set[name] = p
		}
	}
	// The shipped profiles, before any file of dir replaces one: their
	// safety registers stay safety registers.
	shipped := maps.Clone(set)
	if dir != "" {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("profile: profiles_dir: %w", err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			name := strings.TrimSuffix(filepath.Base(f), ".yaml")
			p, err := Parse(name, f, data)
			if err == nil {
				err = keepsSafety(p, f, data, shipped)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			set[name] = p
		}
	}
	return set, errors.Join(errs...)
}

// keepsSafety refuses a profile p (read from file f) that overrides a
// shipped profile — by its name, or as the same model — and leaves a
// register of that profile's safety function without safety: whatever
// the register is called there, one that reads the same coil or
// registers keeps safety: true. Safety is a property of the certified
// device, which no file beside the gateway takes away.
func keepsSafety(p *Profile, f string, data []byte, shipped Set) error {
	var doc *yamlconf.Doc
	for _, name := range shipped.Names() {
		q := shipped[name]
		if name != p.Name && (q.Model == "" || q.Model != p.Model) {
			continue
		}
		for _, sr := range q.Registers {
			if !sr.Safety {
				continue
			}
			for i, r := range p.Registers {
				if r.Safety || r.Area != sr.Area || int(r.Address)+r.Words() <= int(sr.Address) || int(sr.Address)+sr.Words() <= int(r.Address) {
					continue
				}
				if doc == nil {
					doc, _ = yamlconf.Decode(f, data, &Profile{})
				}
				doc.Errorf(fmt.Sprintf("registers[%d].safety", i), "%s (%s %d) is a safety register of the shipped profile %s (%s): a profile that overrides it keeps safety: true, and the register is never written", r.Name, r.Area, r.Address, name, q.Source)
			}
		}
	}
	if doc == nil {
		return nil
	}
	return doc.Err()
}

var validBauds = []int{1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200}

var emulateModels = []string{"diurnal", "gust", "rain", "drift", "walk", "constant", "angle"}

func (p *Profile) validate(doc *yamlconf.Doc) {
	if (len(p.Registers) == 0) == (p.Line == nil) {
		doc.Errorf("registers", "a profile needs either registers (Modbus) or line (serial text), not both or neither")
	}
	if p.Interval < 0 {
		doc.Errorf("interval", "must not be negative")
	}
	if s := p.Serial; s != nil {
		checkSerial(doc, "serial", s)
	}
	if p.Limits.MaxRegisters < 0 || p.Limits.MaxRegisters > spec.MaxReadRegisters {
		doc.Errorf("limits.max_registers", "must be 1..%d, got %d", spec.MaxReadRegisters, p.Limits.MaxRegisters)
	}
	if p.Limits.MaxBits < 0 || p.Limits.MaxBits > spec.MaxReadBits {
		doc.Errorf("limits.max_bits", "must be 1..%d, got %d", spec.MaxReadBits, p.Limits.MaxBits)
	}
	for i, h := range p.Holes {
		if h.From > h.To {
			doc.Errorf(fmt.Sprintf("holes[%d].to", i), "must be ≥ from (%d), got %d", h.From, h.To)
		}
	}
	names := map[string]int{}
	for i := range p.Registers {
		r := &p.Registers[i]
		f := fmt.Sprintf("registers[%d]", i)
		if j, dup := names[r.Name]; dup {
			doc.Errorf(f+".name", "duplicate register name %q (also registers[%d])", r.Name, j)
		}
		names[r.Name] = i
		r.validate(doc, f)
		for j, h := range p.Holes {
			end := int(r.Address) + r.Words() - 1
			if h.Area == r.Area && int(h.From) <= end && int(r.Address) <= int(h.To) {
				doc.Errorf(f+".address", "register %q (%d..%d) lies in holes[%d] (%d..%d)", r.Name, r.Address, end, j, h.From, h.To)
			}
		}
	}
	if l := p.Line; l != nil {
		l.validate(doc, "line")
	}
}

func checkSerial(doc *yamlconf.Doc, f string, s *Serial) {
	if s.Baud != 0 && !slices.Contains(validBauds, s.Baud) {
		doc.Errorf(f+".baud", "unusual baud rate %d (valid: %v)", s.Baud, validBauds)
	}
	if _, err := serialline.ParseParity(s.Parity); s.Parity != "" && err != nil {
		doc.Errorf(f+".parity", "%v, got %q", err, s.Parity)
	}
	if err := serialline.CheckDataBits(s.DataBits); s.DataBits != 0 && err != nil {
		doc.Errorf(f+".data_bits", "%v, got %d", err, s.DataBits)
	}
	if err := serialline.CheckStopBits(s.StopBits); s.StopBits != 0 && err != nil {
		doc.Errorf(f+".stop_bits", "%v, got %d", err, s.StopBits)
	}
}

func (r *Register) validate(doc *yamlconf.Doc, f string) {
	if r.Name == "" {
		doc.Errorf(f+".name", "must not be empty")
	}
	if r.Type == 0 {
		if r.Area.IsBit() {
			r.Type = Bool
		} else {
			r.Type = Uint16
		}
	}
	if r.Area.IsBit() && r.Type != Bool {
		doc.Errorf(f+".type", "a %s holds single bits: type must be bool, got %s", r.Area, r.Type)
	}
	if r.Type == String {
		if r.Length < 1 || r.Length > spec.MaxReadRegisters {
			doc.Errorf(f+".length", "a string needs length 1..%d registers, got %d", spec.MaxReadRegisters, r.Length)
		}
	} else if r.Length != 0 {
		doc.Errorf(f+".length", "length is only for type string")
	}
	if r.Bit != nil {
		if r.Type != Bool || r.Area.IsBit() {
			doc.Errorf(f+".bit", "bit is only for a bool in a holding or input register")
		} else if *r.Bit > 15 {
			doc.Errorf(f+".bit", "must be 0..15, got %d", *r.Bit)
		}
	}
	if end := int(r.Address) + r.Words() - 1; end > math.MaxUint16 {
		doc.Errorf(f+".address", "%s at %d runs past address 65535", r.Type, r.Address)
	}
	if r.Scale != nil && (*r.Scale == 0 || math.IsInf(*r.Scale, 0)) {
		doc.Errorf(f+".scale", "must be a non-zero finite number")
	}
	if (r.Type == Bool || r.Type == String) && (r.Scale != nil || r.Offset != 0) {
		doc.Errorf(f+".scale", "scale and offset do not apply to a %s", r.Type)
	}
	if r.Precision != nil && (*r.Precision < 0 || *r.Precision > 10) {
		doc.Errorf(f+".precision", "must be 0..10, got %d", *r.Precision)
	}
	checkAlarm(doc, f+".alarm", r.Alarm)
	if r.Alarm != nil && (r.Type == Bool || r.Type == String) {
		doc.Errorf(f+".alarm", "alarm thresholds need a numeric type, not %s", r.Type)
	}
	r.validateWrite(doc, f)
	if e := r.Emulate; e != nil {
		if !slices.Contains(emulateModels, e.Model) {
			doc.Errorf(f+".emulate.model", "unknown model %q (valid: %s)", e.Model, strings.Join(emulateModels, ", "))
		}
		if e.Min > e.Max {
			doc.Errorf(f+".emulate.max", "must be ≥ min (%g), got %g", e.Min, e.Max)
		}
		if e.Spike < 0 || e.Spike > 1 {
			doc.Errorf(f+".emulate.spike", "is a chance per minute, 0..1, got %g", e.Spike)
		}
	}
}

func checkAlarm(doc *yamlconf.Doc, f string, a *Alarm) {
	if a == nil {
		return
	}
	if a.Above == nil && a.Below == nil {
		doc.Errorf(f, "give above, below or both")
	}
	if a.Above != nil && a.Below != nil && *a.Below >= *a.Above {
		doc.Errorf(f+".below", "must be less than above (%g), got %g", *a.Above, *a.Below)
	}
}

func (l *Line) validate(doc *yamlconf.Doc, f string) {
	if (l.Regex == "") == (l.Delimiter == "") {
		doc.Errorf(f+".regex", "give either regex (named groups) or delimiter (field index), not both or neither")
	}
	if l.Checksum != "" && l.Checksum != "nmea" {
		doc.Errorf(f+".checksum", "unknown checksum %q (valid: nmea)", l.Checksum)
	}
	if l.Regex != "" {
		re, err := regexp.Compile(l.Regex)
		if err != nil {
			doc.Errorf(f+".regex", "%v", err)
		}
		l.re = re
	}
	seen := map[string]bool{}
	for i := range l.Fields {
		lf := &l.Fields[i]
		ff := fmt.Sprintf("%s.fields[%d]", f, i)
		if seen[lf.Name] {
			doc.Errorf(ff+".name", "duplicate field name %q", lf.Name)
		}
		seen[lf.Name] = true
		switch lf.Type {
		case "":
			lf.Type = "number"
		case "number", "string", "bool":
		default:
			doc.Errorf(ff+".type", "unknown type %q (valid: number, string, bool)", lf.Type)
		}
		if l.Regex != "" {
			if lf.Group == "" || lf.Index != nil {
				doc.Errorf(ff+".group", "with regex, each field names a capture group (group:), not an index")
			} else if l.re != nil && l.re.SubexpIndex(lf.Group) < 0 {
				doc.Errorf(ff+".group", "regex has no group named %q", lf.Group)
			}
		} else if lf.Index == nil || lf.Group != "" {
			doc.Errorf(ff+".index", "with delimiter, each field gives its 0-based index (index:), not a group")
		} else if *lf.Index < 0 {
			doc.Errorf(ff+".index", "must be ≥ 0, got %d", *lf.Index)
		}
		if lf.Scale != nil && *lf.Scale == 0 {
			doc.Errorf(ff+".scale", "must be non-zero")
		}
		if lf.Precision != nil && (*lf.Precision < 0 || *lf.Precision > 10) {
			doc.Errorf(ff+".precision", "must be 0..10, got %d", *lf.Precision)
		}
		checkAlarm(doc, ff+".alarm", lf.Alarm)
		if len(lf.True) == 0 && lf.Type == "bool" {
			lf.True = []string{"1", "true", "True", "A"}
		}
	}
}
