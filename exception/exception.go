// Package exception is report by exception: of the packets the sensors
// poll, it keeps those that say something new (see
// [config.ReportByException]) so that the buffer, the card and the uplink
// carry changes, alarms and heartbeats rather than every poll.
package exception

import (
	"math"
	"sync"
	"time"

	"fieldlink/config"
	"fieldlink/packet"
)

// Filter decides, packet by packet, which packets of the devices that
// report by exception go to the buffer (see [config.ReportByException]).
// A packet goes whole or not at all. What it keeps is by device name; it is safe
// for concurrent use. A nil Filter keeps every packet.
type Filter struct {
	mu      sync.Mutex
	devices map[string]*device // only the devices that report by exception
}

// device is one device's rules and what it last sent.
type device struct {
	interval  time.Duration
	heartbeat time.Duration                       // the shortest of its points'
	rules     map[string]config.ReportByException // by field name

	polled time.Time // At of the last packet polled, sent or not
	sent   *packet.Packet
}

// New takes the rules of c's devices.
func New(c *config.Config) *Filter {
	x := &Filter{devices: map[string]*device{}}
	for _, b := range c.Buses {
		for i := range b.Devices {
			d := &b.Devices[i]
			if !d.ReportsByException() {
				continue
			}
			e := &device{interval: d.Interval, rules: map[string]config.ReportByException{}}
			for _, r := range c.DeviceProfile(d).Registers {
				rule := d.PointReportByException(r.Name)
				e.rules[r.Name] = rule
				if rule.Heartbeat > 0 && (e.heartbeat == 0 || rule.Heartbeat < e.heartbeat) {
					e.heartbeat = rule.Heartbeat
				}
			}
			x.devices[d.Name] = e
		}
	}
	return x
}

// Keep reports whether p goes to the buffer, and records it.
func (x *Filter) Keep(p *packet.Packet) bool {
	if x == nil {
		return true
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.devices[p.DeviceID]
	if e == nil {
		return true
	}
	send := e.changed(p)
	e.polled = p.At
	if send {
		e.sent = p
	}
	return send
}

// changed applies the rules in order: the first packet, an alarm or the
// packet after one, the first packet after missed polls (the device's
// quality changed), a heartbeat due, a point beyond its deadband.
func (e *device) changed(p *packet.Packet) bool {
	last := e.sent
	switch {
	case last == nil:
		return true
	case p.Alarm() || last.Alarm():
		return true
	case p.At.Before(e.polled) || p.At.Sub(e.polled) > 2*e.interval:
		return true
	case e.heartbeat > 0 && p.At.Sub(last.At) >= e.heartbeat:
		return true
	case len(p.Fields) != len(last.Fields):
		return true
	}
	for i, f := range p.Fields {
		was := last.Fields[i]
		if f.Name != was.Name || beyond(f.Value, was.Value, e.rules[f.Name]) {
			return true
		}
	}
	return false
}

// beyond reports whether v moved past its deadband from was, the value
// last sent. Without a deadband any change counts; a value that is not a
// number counts when its text changes.
func beyond(v, was packet.Value, r config.ReportByException) bool {
	a, okA := v.Float64()
	b, okB := was.Float64()
	if !okA || !okB || v.Kind() != was.Kind() || v.Kind() == packet.KindBool {
		return v.String() != was.String() || v.Kind() != was.Kind()
	}
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) != math.IsNaN(b)
	}
	d := math.Abs(a - b)
	switch {
	case r.Deadband != nil:
		return d > *r.Deadband
	case r.DeadbandPercent != nil:
		if b == 0 {
			return d > 0
		}
		return d > *r.DeadbandPercent/100*math.Abs(b)
	}
	return a != b
}
