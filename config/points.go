package config

import (
	"fmt"
	"slices"
	"strings"

	"fieldlink/sensors/profile"
)

// PointChanges says what each of d's points changes from its profile, a
// line each with the line of the site file that says so ("site.yaml:12:
// point CH4: alarm above 1 (profile above 1.5)"), for gateway check.
func (c *Config) PointChanges(d *Device) []string {
	var lines []string
	base, eff := c.Profiles[d.Profile], c.DeviceProfile(d)
	for _, pt := range d.Points {
		i := slices.IndexFunc(base.Registers, func(r profile.Register) bool { return r.Name == pt.Point })
		if i < 0 {
			continue
		}
		was, now := &base.Registers[i], &eff.Registers[i]
		var ch []string
		if now.Name != was.Name {
			ch = append(ch, fmt.Sprintf("name %s (profile %s)", now.Name, was.Name))
		}
		if pt.Scale != nil {
			ch = append(ch, fmt.Sprintf("scale %g (profile %g)", now.ScaleOr1(), was.ScaleOr1()))
		}
		if pt.Offset != nil {
			ch = append(ch, fmt.Sprintf("offset %g (profile %g)", now.Offset, was.Offset))
		}
		if pt.Alarm != nil {
			ch = append(ch, fmt.Sprintf("alarm %s (profile %s)", now.Alarm, was.Alarm))
		}
		if e := (ReportByException{Deadband: pt.Deadband, DeadbandPercent: pt.DeadbandPercent, Heartbeat: pt.Heartbeat}); e != (ReportByException{}) {
			ch = append(ch, e.String())
		}
		if len(ch) == 0 {
			ch = append(ch, "unchanged")
		}
		lines = append(lines, fmt.Sprintf("%s:%d: point %s: %s", c.File, pt.Line, pt.Point, strings.Join(ch, ", ")))
	}
	return lines
}
