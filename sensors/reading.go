package sensors

import (
	"time"

	"fieldlink/packet"
	"fieldlink/sensors/plan"
	"fieldlink/sensors/profile"
)

// Quality says how far a point's shown value can be trusted.
type Quality uint8

// Reading qualities. A point is never shown as a number it did not read: a
// point that was never read has no value, and one whose device stopped
// answering keeps its last value only with the quality that says so.
const (
	// Bad: never read, or its device is offline.
	Bad Quality = iota
	// Stale: the device's last poll failed, or the value is older than two
	// intervals.
	Stale
	// Good: read by the device's last poll, within two intervals.
	Good
)

func (q Quality) String() string { return [...]string{"bad", "stale", "good"}[q] }

// MarshalText writes the quality's name.
func (q Quality) MarshalText() ([]byte, error) { return []byte(q.String()), nil }

// Reading is the last reading of one point of a device.
type Reading struct {
	Device string
	Name   string
	Unit   string
	// Value is the last value read; the zero Value when never read.
	Value packet.Value
	// At is when Value was read; zero when never.
	At time.Time
	// Raw is the wire bytes Value was decoded from: two per register, or
	// one byte (0 or 1) for a coil or discrete input; nil for a serial
	// sensor's field or a point never read.
	Raw     []byte
	Quality Quality
	// Alarm is set while the last reading is past one of the point's
	// alarm thresholds (its packet named it in AlarmFields); nil otherwise.
	Alarm *Crossed
}

// Crossed is the alarm threshold a point's last reading is past.
type Crossed struct {
	// Above: the value is at or above Limit; else at or below it.
	Above bool
	Limit float64
	// Since is the first reading of the point's current run of readings
	// in alarm.
	Since time.Time
}

// crossed is which of a's thresholds v is past, the run begun at since;
// nil when none is.
func crossed(a *profile.Alarm, v packet.Value, since time.Time) *Crossed {
	f, ok := v.Float64()
	switch {
	case !ok || a == nil:
		return nil
	case a.Above != nil && f >= *a.Above:
		return &Crossed{Above: true, Limit: *a.Above, Since: since}
	case a.Below != nil && f <= *a.Below:
		return &Crossed{Limit: *a.Below, Since: since}
	}
	return nil
}

// lastRead keeps the last good poll of a device, under Bus.mu (or
// SerialSensor.mu): its packet's fields and each request's reply. Both are
// kept by reference, not copied: a poll makes new ones (a Reader's reply
// is the caller's, a packet's fields are its own) and nothing changes them
// afterwards, so the hot path pays nothing for the status page.
type lastRead struct {
	at     time.Time
	fields []packet.Field
	raw    [][]byte // by request
	// alarmSince is, for each field of the last reading in alarm, when
	// its run of readings in alarm began.
	alarmSince map[string]time.Time
}

// keep records a successful poll.
func (r *lastRead) keep(p *packet.Packet, replies [][]byte) {
	r.at, r.fields = p.At, p.Fields
	r.raw = append(r.raw[:0], replies...)
	if len(p.AlarmFields) == 0 {
		clear(r.alarmSince)
		return
	}
	since := make(map[string]time.Time, len(p.AlarmFields))
	for _, name := range p.AlarmFields {
		if t, ok := r.alarmSince[name]; ok {
			since[name] = t
		} else {
			since[name] = p.At
		}
	}
	r.alarmSince = since
}

// quality of a point last read at at by a device whose health is h.
func quality(at time.Time, h Health, interval time.Duration, now time.Time) Quality {
	switch {
	case at.IsZero() || h == Offline:
		return Bad
	case h != OK || (interval > 0 && now.Sub(at) > 2*interval):
		return Stale
	}
	return Good
}

// readings lists a Modbus device's points from its last reading.
func (d *device) readings(now time.Time) []Reading {
	regs := d.spec.Profile.Registers
	out := make([]Reading, len(regs))
	q := quality(d.last.at, d.status.Health, d.spec.Interval, now)
	for i := range regs {
		r := &regs[i]
		out[i] = Reading{Device: d.spec.Name, Name: r.Name, Unit: r.Unit, Quality: q}
		if d.last.at.IsZero() {
			out[i].Quality = Bad
			continue
		}
		out[i].At = d.last.at
		if i < len(d.last.fields) {
			out[i].Value = d.last.fields[i].Value
		}
		out[i].Raw = rawOf(r, d.reqs, d.last.raw)
		if since, ok := d.last.alarmSince[r.Name]; ok {
			out[i].Alarm = crossed(r.Alarm, out[i].Value, since)
		}
	}
	return out
}

// rawOf cuts register r's bytes out of the replies to reqs.
func rawOf(r *profile.Register, reqs []plan.Request, replies [][]byte) []byte {
	for i, req := range reqs {
		if i >= len(replies) || req.Area != r.Area || r.Address < req.Start || int(r.Address) >= int(req.Start)+int(req.Count) {
			continue
		}
		off := int(r.Address - req.Start)
		data := replies[i]
		if r.Area.IsBit() {
			if off/8 < len(data) {
				return []byte{data[off/8] >> (off % 8) & 1}
			}
			return nil
		}
		if end := 2 * (off + r.Words()); end <= len(data) {
			return append([]byte(nil), data[2*off:end]...)
		}
	}
	return nil
}

// Readings lists the last reading of every point of the bus's devices, in
// configuration order.
func (b *Bus) Readings(now time.Time) []Reading {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Reading
	for _, d := range b.devs {
		out = append(out, d.readings(now)...)
	}
	return out
}

// Latest returns the last reading of one point of a device of the bus.
func (b *Bus) Latest(device, point string, now time.Time) (Reading, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.devs {
		if d.spec.Name != device {
			continue
		}
		for _, p := range d.readings(now) {
			if p.Name == point {
				return p, true
			}
		}
	}
	return Reading{}, false
}

// Readings lists the sensor's fields from its last reading.
func (l *SerialSensor) Readings(now time.Time) []Reading {
	l.mu.Lock()
	defer l.mu.Unlock()
	fields := l.spec.Profile.Line.Fields
	q := quality(l.last.at, l.status.Health, l.spec.Interval, now)
	out := make([]Reading, len(fields))
	for i, f := range fields {
		out[i] = Reading{Device: l.spec.Name, Name: f.Name, Unit: f.Unit, Quality: q}
		if l.last.at.IsZero() {
			out[i].Quality = Bad
			continue
		}
		out[i].At = l.last.at
		for _, lf := range l.last.fields {
			if lf.Name == f.Name {
				out[i].Value = lf.Value
			}
		}
		if since, ok := l.last.alarmSince[f.Name]; ok {
			out[i].Alarm = crossed(f.Alarm, out[i].Value, since)
		}
	}
	return out
}

// Readings lists the last reading of every point of the site, buses first.
func (s *Poller) Readings(now time.Time) []Reading {
	var out []Reading
	for _, b := range s.buses {
		out = append(out, b.Readings(now)...)
	}
	for _, l := range s.serials {
		out = append(out, l.Readings(now)...)
	}
	return out
}

// Latest returns the last reading of one point, for interlocks: false
// when the site has no such device or point.
func (s *Poller) Latest(device, point string, now time.Time) (Reading, bool) {
	for _, b := range s.buses {
		if p, ok := b.Latest(device, point, now); ok {
			return p, true
		}
	}
	for _, l := range s.serials {
		if l.spec.Name != device {
			continue
		}
		for _, p := range l.Readings(now) {
			if p.Name == point {
				return p, true
			}
		}
	}
	return Reading{}, false
}
