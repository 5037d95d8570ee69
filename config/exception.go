package config

import (
	"fmt"
	"math"
	"strings"
	"time"

	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/profile"
)

// ReportByException is report by exception: a device's packet is stored only when
// one of its points moved beyond its deadband since the last packet
// stored, or a heartbeat is due. Alarm packets, the packet after an alarm
// clears, and the first packet after the device missed polls always go.
type ReportByException struct {
	// Deadband is the change, in the point's unit, that a point must
	// exceed to send the packet.
	Deadband *float64
	// DeadbandPercent is the deadband as a percentage of the value last
	// sent (any change of a value last sent as 0).
	DeadbandPercent *float64
	// Heartbeat sends the packet at least this often, changed or not. A
	// packet goes when the shortest heartbeat of its points is due.
	Heartbeat time.Duration
}

// String says the setting: "deadband 0.5, heartbeat 5m0s", "deadband
// 10%", "any change".
func (e ReportByException) String() string {
	var s []string
	switch {
	case e.Deadband != nil:
		s = append(s, fmt.Sprintf("deadband %g", *e.Deadband))
	case e.DeadbandPercent != nil:
		s = append(s, fmt.Sprintf("deadband %g%%", *e.DeadbandPercent))
	}
	if e.Heartbeat != 0 {
		s = append(s, "heartbeat "+e.Heartbeat.String())
	}
	if len(s) == 0 {
		return "any change"
	}
	return strings.Join(s, ", ")
}

// ReportByException is the device's own report by exception.
func (d *Device) ReportByException() ReportByException {
	return ReportByException{Deadband: d.Deadband, DeadbandPercent: d.DeadbandPercent, Heartbeat: d.Heartbeat}
}

// PointReportByException is the report by exception of the point whose name in
// the packets is name: its own settings, else the device's.
func (d *Device) PointReportByException(name string) ReportByException {
	e := d.ReportByException()
	for _, p := range d.Points {
		if p.Field() != name {
			continue
		}
		if p.Deadband != nil || p.DeadbandPercent != nil {
			e.Deadband, e.DeadbandPercent = p.Deadband, p.DeadbandPercent
		}
		if p.Heartbeat != 0 {
			e.Heartbeat = p.Heartbeat
		}
	}
	return e
}

// DefaultHeartbeat is a device's heartbeat when it has a deadband and no
// heartbeat.
const DefaultHeartbeat = 10 * time.Minute

// set reports whether any setting is given.
func (e ReportByException) set() bool {
	return e.Deadband != nil || e.DeadbandPercent != nil || e.Heartbeat != 0
}

// ReportsByException reports whether d's packets are stored only on
// change or heartbeat.
func (d *Device) ReportsByException() bool {
	if d.ReportByException().set() {
		return true
	}
	for _, p := range d.Points {
		if (ReportByException{p.Deadband, p.DeadbandPercent, p.Heartbeat}).set() {
			return true
		}
	}
	return false
}

// checkReportByException validates e at field f (a device, or one of its points
// when r is its register).
func checkReportByException(doc *yamlconf.Doc, f string, e *ReportByException, interval time.Duration, r *profile.Register) {
	if e.Deadband != nil && e.DeadbandPercent != nil {
		doc.Errorf(f+".deadband_percent", "give deadband or deadband_percent, not both")
	}
	if e.Deadband != nil && (*e.Deadband < 0 || math.IsNaN(*e.Deadband) || math.IsInf(*e.Deadband, 0)) {
		doc.Errorf(f+".deadband", "must be a finite number ≥ 0 (in the point's unit), got %g", *e.Deadband)
	}
	if e.DeadbandPercent != nil && !(*e.DeadbandPercent > 0 && *e.DeadbandPercent <= 100) {
		doc.Errorf(f+".deadband_percent", "must be above 0 and at most 100, got %g", *e.DeadbandPercent)
	}
	if e.Heartbeat != 0 && e.Heartbeat < interval {
		doc.Errorf(f+".heartbeat", "must be at least the device's interval (%v), got %v", interval, e.Heartbeat)
	}
	if r != nil && (r.Type == profile.Bool || r.Type == profile.String || r.Area.IsBit()) && (e.Deadband != nil || e.DeadbandPercent != nil) {
		doc.Errorf(f+".deadband", "a deadband needs a numeric point; %q is a %s and goes whenever it changes", r.Name, r.Type)
	}
}
