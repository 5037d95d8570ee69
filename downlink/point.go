package downlink

import (
	"fmt"
	"math"
	"time"

	"fieldlink/config"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/profile"
)

// point is a writable point of a device, as the site file allows it.
type point struct {
	device string
	reg    *profile.Register
	rule   config.Writable
}

// value checks a command's value against the point's rules and its
// register, exactly (see exact), and returns it as the number the bus
// takes (coils: 0 or 1).
func (p *point) value(v Value) (float64, error) {
	isBool := p.reg.Area.IsBit() || p.reg.Type == profile.Bool
	if b, ok := v.Bool(); ok {
		if !isBool {
			return 0, fmt.Errorf("takes a number, not %s", v)
		}
		if b {
			return 1, nil
		}
		return 0, nil
	}
	f, ok := v.Float()
	if !ok || isBool {
		return 0, fmt.Errorf("takes true or false, not %s", v)
	}
	if err := p.exact(v.String(), f); err != nil {
		return 0, err
	}
	return f, nil
}

// matches reports whether a read-back agrees with the value written:
// within one step (or one raw unit, for an integer register).
func (p *point) matches(rb packet.Value, v float64) bool {
	got, ok := rb.Float64()
	if rb.Kind() == packet.KindBool {
		got, ok = 0, true
		if rb.String() == "True" {
			got = 1
		}
	}
	if !ok {
		return false
	}
	tol := p.rule.Step
	if tol == 0 {
		switch p.reg.Type {
		case profile.Float32:
			tol = math.Abs(v) * 1e-6
		case profile.Float64:
			tol = math.Abs(v) * 1e-12
		default:
			tol = math.Abs(p.reg.ScaleOr1()) * 1e-6 // exact, but for the binary fraction
		}
	}
	return math.Abs(got-v) <= tol
}

// interlocked returns why an interlock denies the write, "" when none does.
func (e *Engine) interlocked(p *point, now time.Time) string {
	for _, il := range p.rule.Interlock {
		pt, ok := e.opt.Points.Latest(il.Device, il.Point, now)
		if !ok || pt.At.IsZero() {
			return fmt.Sprintf("%s.%s has no reading", il.Device, il.Point)
		}
		if age := now.Sub(pt.At); age > il.MaxAge || pt.Quality == sensors.Bad {
			return fmt.Sprintf("%s.%s was read %s ago (max_age %v): too old to rely on", il.Device, il.Point, age.Round(time.Second), il.MaxAge)
		}
		f, ok := pt.Value.Float64()
		if pt.Value.Kind() == packet.KindBool {
			f, ok = 0, true
			if pt.Value.String() == "True" {
				f = 1
			}
		}
		if !ok {
			return fmt.Sprintf("%s.%s is not a number (%s)", il.Device, il.Point, pt.Value)
		}
		if il.Above != nil && !(f > *il.Above) {
			return fmt.Sprintf("%s.%s is %v, not above %v", il.Device, il.Point, pt.Value, *il.Above)
		}
		if il.Below != nil && !(f < *il.Below) {
			return fmt.Sprintf("%s.%s is %v, not below %v", il.Device, il.Point, pt.Value, *il.Below)
		}
	}
	return ""
}
