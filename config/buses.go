package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/profile"
)

// Bus is one RS-485 line or one Modbus TCP endpoint.
type Bus struct {
	Name string `yaml:"name,required"`
	// URL: rtu:///dev/ttyUSB0?baud=9600&parity=N&data_bits=8&stop_bits=1,
	// tcp://host:502 or rtuovertcp://host:port.
	URL string `yaml:"url,required"`
	// Timeout for one reply; default 500ms on serial lines, 1s over TCP.
	Timeout time.Duration `yaml:"timeout"`
	// Turnaround is the slaves' typical think time, used to decide which
	// gaps between registers are worth reading through; default 10ms.
	Turnaround *time.Duration `yaml:"turnaround"`
	// MaxGap caps the unwanted registers a merged read may span; unset
	// lets the bus timing decide.
	MaxGap *int `yaml:"max_gap"`
	// Backoff caps the wait between retries of a failing device; default
	// 5m.
	Backoff time.Duration `yaml:"backoff"`
	Devices []Device      `yaml:"devices"`
}

// PlanMaxGap is max_gap as the request planner takes it: -1 lets it
// decide from the bus timing.
func (b Bus) PlanMaxGap() int {
	if b.MaxGap != nil {
		return *b.MaxGap
	}
	return -1
}

// Device is one slave on a bus.
type Device struct {
	// Name is the packet's DeviceId; unique in the site.
	Name    string `yaml:"name,required"`
	Profile string `yaml:"profile,required"`
	Slave   int    `yaml:"slave,required"`
	// Interval between polls; default the profile's, else 10s.
	Interval time.Duration `yaml:"interval"`
	// DataType of the packets; default the profile's.
	DataType string `yaml:"data_type"`
	// Writable lists the points commands may write (see Downlink).
	Writable []Writable `yaml:"writable"`
	// Points change the profile's points for this device alone (see
	// [Point]); the device's packets use the result.
	Points []Point `yaml:"points"`
	// Report by exception for every point of the device; a point may set
	// its own. Default DefaultHeartbeat once a deadband is set.
	// Deadband is the change, in the point's unit, that a point must
	// exceed to send its device's packet (see [ReportByException]).
	Deadband *float64 `yaml:"deadband"`
	// DeadbandPercent is the deadband as a percentage of the value last
	// sent; one of Deadband and DeadbandPercent.
	DeadbandPercent *float64 `yaml:"deadband_percent"`
	// Heartbeat sends the packet at least this often, changed or not.
	Heartbeat time.Duration `yaml:"heartbeat"`

	// effective is the profile with Points applied; nil without Points.
	effective *profile.Profile
}

// Point changes one point of a device's profile: its name in the packets,
// its scale and offset (value = raw·scale + offset), its alarm limits.
// Unset fields keep the profile's.
type Point struct {
	// Point is the register's name in the profile.
	Point  string         `yaml:"point,required"`
	Name   string         `yaml:"name"`
	Scale  *float64       `yaml:"scale"`
	Offset *float64       `yaml:"offset"`
	Alarm  *profile.Alarm `yaml:"alarm"`
	// The point's own report by exception; unset ones are the device's.
	// Deadband is the change, in the point's unit, that a point must
	// exceed to send its device's packet (see [ReportByException]).
	Deadband *float64 `yaml:"deadband"`
	// DeadbandPercent is the deadband as a percentage of the value last
	// sent; one of Deadband and DeadbandPercent.
	DeadbandPercent *float64 `yaml:"deadband_percent"`
	// Heartbeat sends the packet at least this often, changed or not.
	Heartbeat time.Duration `yaml:"heartbeat"`

	// Line is the line of the site file that names the point, for check.
	Line int `yaml:"-" json:"-"`
}

// Field is the point's name in the packets.
func (p *Point) Field() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Point
}

// DeviceProfile is the profile d polls with: its profile with d's points
// applied.
func (c *Config) DeviceProfile(d *Device) *profile.Profile {
	if d.effective != nil {
		return d.effective
	}
	return c.Profiles[d.Profile]
}

func (b *Bus) defaults(serial bool) {
	if b.Timeout == 0 {
		b.Timeout = time.Second
		if serial {
			b.Timeout = 500 * time.Millisecond
		}
	}
	if b.Turnaround == nil {
		d := 10 * time.Millisecond
		b.Turnaround = &d
	}
	if b.Backoff == 0 {
		b.Backoff = 5 * time.Minute
	}
}

func serialMismatch(ep modbus.Endpoint, s *profile.Serial) string {
	var diff []string
	if s.Baud != 0 && s.Baud != ep.Baud {
		diff = append(diff, fmt.Sprintf("baud %d", s.Baud))
	}
	if s.Parity != "" && s.Parity != string(ep.Parity) {
		diff = append(diff, "parity "+s.Parity)
	}
	if s.StopBits != 0 && s.StopBits != ep.StopBits {
		diff = append(diff, fmt.Sprintf("stop bits %d", s.StopBits))
	}
	return strings.Join(diff, ", ")
}

// DeviceCount is the number of Modbus devices and serial sensors.
func (c *Config) DeviceCount() int {
	n := len(c.SerialSensors)
	for _, b := range c.Buses {
		n += len(b.Devices)
	}
	return n
}

// interlockOn names the writable point whose interlock reads point of
// device, or "" when none does.
func (c *Config) interlockOn(device, point string) string {
	for _, b := range c.Buses {
		for _, d := range b.Devices {
			for _, w := range d.Writable {
				for _, il := range w.Interlock {
					if il.Device == device && il.Point == point {
						return d.Name + "." + w.Point
					}
				}
			}
		}
	}
	return ""
}

// devicePoints checks a device's points against its profile p and applies
// them.
func (c *Config) devicePoints(doc *yamlconf.Doc, df string, d *Device, p *profile.Profile) {
	if len(d.Points) == 0 || p == nil {
		return
	}
	writable := map[string]bool{}
	for _, w := range d.Writable {
		writable[w.Point] = true
	}
	names := map[string]string{} // a point's name in the packets → who gives it
	for _, r := range p.Registers {
		names[r.Name] = "the profile's register " + strconv.Quote(r.Name)
	}
	seen := map[string]int{}
	ok := true
	ovs := make([]profile.Override, len(d.Points))
	for k := range d.Points {
		pt := &d.Points[k]
		pf := fmt.Sprintf("%s.points[%d]", df, k)
		pt.Line, _ = doc.Line(pf + ".point")
		ovs[k] = profile.Override{Point: pt.Point, Name: pt.Name, Scale: pt.Scale, Offset: pt.Offset, Alarm: pt.Alarm}
		r, found := p.Register(pt.Point)
		if !found {
			if pt.Point != "" {
				var known []string
				for _, r := range p.Registers {
					known = append(known, r.Name)
				}
				doc.Errorf(pf+".point", "profile %s has no point %q%s (its points: %s)", p.Name, pt.Point, yamlconf.DidYouMean(pt.Point, known), strings.Join(known, ", "))
			}
			ok = false
			continue
		}
		if j, dup := seen[pt.Point]; dup {
			doc.Errorf(pf+".point", "point %q is already changed by points[%d] (one entry per point)", pt.Point, j)
			ok = false
			continue
		}
		seen[pt.Point] = k
		if writable[pt.Point] && (pt.Name != "" || pt.Scale != nil || pt.Offset != nil) {
			// A command writes the profile's point by its name and scale.
			doc.Errorf(pf+".point", "point %q is writable on this device: its name, scale and offset stay the profile's (change its alarm only, or remove it from writable)", pt.Point)
			ok = false
		}
		if pt.Name != "" && pt.Name != pt.Point {
			if by := c.interlockOn(d.Name, pt.Point); by != "" {
				// An interlock reads the point by the profile's name.
				doc.Errorf(pf+".name", "point %q keeps its name: the interlock of %s reads it", pt.Point, by)
				ok = false
			}
			if prev, dup := names[pt.Name]; dup {
				doc.Errorf(pf+".name", "name %q is already used by %s (a packet's field names are unique)", pt.Name, prev)
				ok = false
			}
			names[pt.Name] = pf
		}
		if pt.Name == "" && doc.Has(pf+".name") {
			doc.Errorf(pf+".name", "must not be empty (leave name out to keep %q)", pt.Point)
		}
		profile.CheckOverride(doc, pf, r, &ovs[k])
		checkReportByException(doc, pf, &ReportByException{pt.Deadband, pt.DeadbandPercent, pt.Heartbeat}, d.Interval, r)
	}
	if !ok {
		return
	}
	// Other errors, if any, fail the load: the result is never used.
	q, err := p.WithOverrides(ovs)
	if err != nil {
		doc.Errorf(df+".points", "%v", err)
		return
	}
	d.effective = q
}
