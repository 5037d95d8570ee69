package profile

import (
	"fmt"
	"math"
	"slices"

	"fieldlink/internal/yamlconf"
)

// Override changes one register of a profile for one device, as a site
// file's points: section says: its name in the packets, its scale and
// offset, its alarm limits. Nil fields keep the profile's.
type Override struct {
	// Point is the register's name in the profile.
	Point  string
	Name   string // "" keeps the profile's
	Scale  *float64
	Offset *float64
	// Alarm replaces the register's alarm limits whole.
	Alarm *Alarm
}

// CheckOverride reports through doc (under field f) what keeps o from
// applying to register r.
func CheckOverride(doc *yamlconf.Doc, f string, r *Register, o *Override) {
	numeric := r.Type != Bool && r.Type != String && !r.Area.IsBit()
	if o.Scale != nil {
		if *o.Scale == 0 || math.IsInf(*o.Scale, 0) || math.IsNaN(*o.Scale) {
			doc.Errorf(f+".scale", "must be a non-zero finite number")
		} else if !numeric {
			doc.Errorf(f+".scale", "scale does not apply to %q, a %s", r.Name, r.Type)
		}
	}
	if o.Offset != nil && !numeric {
		doc.Errorf(f+".offset", "offset does not apply to %q, a %s", r.Name, r.Type)
	}
	if o.Alarm != nil {
		checkAlarm(doc, f+".alarm", o.Alarm)
		if !numeric {
			doc.Errorf(f+".alarm", "alarm thresholds need a numeric point; %q is a %s", r.Name, r.Type)
		}
	}
}

// WithOverrides returns a copy of p with ovs applied; p is not changed.
// The overrides must have been checked: an unknown point is an error.
func (p *Profile) WithOverrides(ovs []Override) (*Profile, error) {
	q := *p
	q.Registers = append([]Register(nil), p.Registers...)
	for _, o := range ovs {
		// By the profile's names: a renamed register keeps its place.
		i := slices.IndexFunc(p.Registers, func(r Register) bool { return r.Name == o.Point })
		if i < 0 {
			return nil, fmt.Errorf("profile %s: no register %q to override", p.Name, o.Point)
		}
		r := &q.Registers[i]
		if o.Name != "" {
			r.Name = o.Name
		}
		if o.Scale != nil {
			s := *o.Scale
			r.Scale = &s
		}
		if o.Offset != nil {
			r.Offset = *o.Offset
		}
		if o.Alarm != nil {
			a := *o.Alarm
			r.Alarm = &a
		}
	}
	return &q, nil
}
