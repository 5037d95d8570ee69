// Package config is the site file: one YAML file per farm or mine that says
// who the site is, which buses and devices to poll, and how.
//
// [Load] reads and validates a file in one pass and returns every problem
// found, each naming the file, line and field. Defaults are filled in by
// Load, so the rest of the gateway never guesses.
package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"fieldlink/internal/yamlconf"
	"fieldlink/metrics"
	"fieldlink/packet"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/profile"
)

// Config is a site file.
type Config struct {
	Site    Site    `yaml:"site,required"`
	Gateway Gateway `yaml:"gateway,required"`
	// ProfilesDir holds extra firmware profiles (*.yaml) that extend or
	// override the embedded ones; relative to the site file.
	ProfilesDir   string         `yaml:"profiles_dir"`
	Buses         []Bus          `yaml:"buses"`
	SerialSensors []SerialSensor `yaml:"serial_sensors"`
	Packet        Packet         `yaml:"packet"`
	Buffer        Buffer         `yaml:"buffer"`
	Metrics       Metrics        `yaml:"metrics"`
	Uplink        *Uplink        `yaml:"uplink"`
	Downlink      Downlink       `yaml:"downlink"`
	RemoteConfig  *RemoteConfig  `yaml:"remote_config"`

	// File is the path the config was loaded from.
	File string `yaml:"-"`
	// Location is Site.Timezone, loaded.
	Location *time.Location `yaml:"-"`
	// Profiles are the embedded and site profiles, by name.
	Profiles profile.Set `yaml:"-"`
	// Warnings are things worth a look that do not stop the gateway.
	Warnings []string `yaml:"-"`

	// brokenProfiles are profiles whose files have errors, reported
	// already: a device using one is not also called unknown.
	brokenProfiles map[string]bool
}

// Site names the farm or mine.
type Site struct {
	ID string `yaml:"id,required"`
	// IDField is the DataHead key that carries ID: FarmId (default) or MineId.
	IDField string `yaml:"id_field"`
	// Timezone for the packet's Date and Time (IANA name); default UTC.
	Timezone string `yaml:"timezone"`
}

// Gateway identifies this gateway among the site's.
type Gateway struct {
	ID string `yaml:"id,required"`
}

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
	// exceed to send its device's packet (see [Exception]).
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
	// exceed to send its device's packet (see [Exception]).
	Deadband *float64 `yaml:"deadband"`
	// DeadbandPercent is the deadband as a percentage of the value last
	// sent; one of Deadband and DeadbandPercent.
	DeadbandPercent *float64 `yaml:"deadband_percent"`
	// Heartbeat sends the packet at least this often, changed or not.
	Heartbeat time.Duration `yaml:"heartbeat"`

	// Line is the line of the site file that names the point, for check.
	Line int `yaml:"-" json:"-"`
}

// Exception is report by exception: a device's packet is stored only when
// one of its points moved beyond its deadband since the last packet
// stored, or a heartbeat is due. Alarm packets, the packet after an alarm
// clears, and the first packet after the device missed polls always go.
type Exception struct {
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

// Exception is the device's own report by exception.
func (d *Device) Exception() Exception {
	return Exception{Deadband: d.Deadband, DeadbandPercent: d.DeadbandPercent, Heartbeat: d.Heartbeat}
}

// PointException is the report by exception of the point whose name in
// the packets is name: its own settings, else the device's.
func (d *Device) PointException(name string) Exception {
	e := d.Exception()
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
func (e Exception) set() bool {
	return e.Deadband != nil || e.DeadbandPercent != nil || e.Heartbeat != 0
}

// ReportsByException reports whether d's packets are stored only on
// change or heartbeat.
func (d *Device) ReportsByException() bool {
	if d.Exception().set() {
		return true
	}
	for _, p := range d.Points {
		if (Exception{p.Deadband, p.DeadbandPercent, p.Heartbeat}).set() {
			return true
		}
	}
	return false
}

// checkException validates e at field f (a device, or one of its points
// when r is its register).
func checkException(doc *yamlconf.Doc, f string, e *Exception, interval time.Duration, r *profile.Register) {
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

// SerialSensor is a non-Modbus sensor that prints lines on a serial port.
type SerialSensor struct {
	Name string `yaml:"name,required"`
	// URL: serial:///dev/ttyS1?baud=4800 (parity, data_bits, stop_bits too).
	URL     string `yaml:"url,required"`
	Profile string `yaml:"profile,required"`
	// Interval: at most one packet per interval (the latest line); 0 = one
	// packet per line.
	Interval time.Duration `yaml:"interval"`
	DataType string        `yaml:"data_type"`
}

// Metrics is the listener of gateway run: Prometheus metrics, health and
// readiness, and the status page.
type Metrics struct {
	// Listen is host:port; default 127.0.0.1:9273. "off" disables it.
	Listen string `yaml:"listen"`
	// AllowRemote lets Listen be a non-loopback address. Clients that are
	// not on loopback must then present the token of TokenFile to see the
	// status page.
	AllowRemote bool `yaml:"allow_remote"`
	// ScrapeToken makes /metrics take the token too; by default it stays
	// open, as Prometheus servers expect.
	ScrapeToken bool `yaml:"scrape_token"`
	// TokenFile holds the status page's token, written at the first start
	// with allow_remote (mode 0600); relative to the site file. Default:
	// status-token in the buffer file's directory.
	TokenFile string `yaml:"token_file"`
	// Readings adds each point's latest good reading to /metrics
	// (fieldlink_reading, by device and point), for sites that scrape
	// their values with Prometheus; default off.
	Readings bool `yaml:"readings"`
}

// DefaultTokenFile is the status token's file name beside the buffer file.
const DefaultTokenFile = "status-token"

// Packet shapes the JSON packets.
type Packet struct {
	// Values: strings (default, as the platforms expect: "Rainfall":"0")
	// or number.
	Values packet.Encoding `yaml:"values"`
}

// Load reads, decodes and validates a site file, and loads its profiles
// (the embedded set from embedded, plus profiles_dir).
func Load(file string, embedded ProfileSource) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(file, data, embedded)
}

// ProfileSource loads the profile set for a site; profile.Load with the
// embedded firmware-profiles in production.
type ProfileSource func(dir string) (profile.Set, error)

// Parse is Load on data already read.
func Parse(file string, data []byte, profiles ProfileSource) (*Config, error) {
	c := &Config{File: file}
	doc, err := yamlconf.Decode(file, data, c)
	if doc.Broken() {
		return nil, err
	}
	c.defaults()
	dir := c.ProfilesDir
	if dir != "" && !strings.HasPrefix(dir, "/") {
		if i := strings.LastIndexByte(file, '/'); i >= 0 {
			dir = file[:i+1] + dir
		}
	}
	set, err := profiles(dir)
	var profileErrs error
	if err != nil {
		if _, ok := yamlconf.IsErrors(err); ok && set != nil {
			// Reported with the site file's own errors, so that one run
			// shows them all; the devices using a broken profile are not
			// called unknown.
			profileErrs, c.brokenProfiles = err, brokenProfiles(err)
		} else if ok || dir == "" {
			return nil, err
		} else {
			doc.Errorf("profiles_dir", "%v (give a directory of *.yaml profiles, relative to the site file)", err)
			// Check the devices against the embedded profiles, rather
			// than report each of them as unknown.
			if set, err = profiles(""); err != nil {
				return nil, err
			}
		}
	}
	c.Profiles = set
	c.validate(doc)
	c.validateBuffer(doc)
	c.validateUplink(doc)
	c.validateDownlink(doc)
	c.validateRemote(doc)
	c.metricsDefaults()
	if profileErrs != nil {
		return nil, errors.Join(profileErrs, doc.Err())
	}
	if err := doc.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// brokenProfiles names the profiles whose files have the errors in err.
func brokenProfiles(err error) map[string]bool {
	broken := map[string]bool{}
	var walk func(error)
	walk = func(err error) {
		var e *yamlconf.Error
		switch x := err.(type) {
		case interface{ Unwrap() []error }:
			for _, err := range x.Unwrap() {
				walk(err)
			}
		default:
			if errors.As(err, &e) {
				broken[strings.TrimSuffix(filepath.Base(e.File), ".yaml")] = true
			}
		}
	}
	walk(err)
	return broken
}

func (c *Config) defaults() {
	if c.Site.IDField == "" {
		c.Site.IDField = "FarmId"
	}
	if c.Site.Timezone == "" {
		c.Site.Timezone = "UTC"
	}
	if c.Metrics.Listen == "" {
		c.Metrics.Listen = metrics.DefaultListen
	}
}

// Well-known limits.
const (
	minInterval = 100 * time.Millisecond
	maxTimeout  = time.Minute
)

func (c *Config) validate(doc *yamlconf.Doc) {
	if c.Site.IDField != "FarmId" && c.Site.IDField != "MineId" {
		doc.Errorf("site.id_field", "must be FarmId or MineId, got %q", c.Site.IDField)
	}
	if c.Site.ID == "" && doc.Has("site.id") {
		doc.Errorf("site.id", "must not be empty (the farm's or mine's id on the platform, such as \"001\")")
	}
	loc, err := time.LoadLocation(c.Site.Timezone)
	if err != nil {
		doc.Errorf("site.timezone", "unknown time zone %q (%s)", c.Site.Timezone, zoneHint())
	}
	c.Location = loc
	if c.Gateway.ID == "" && doc.Has("gateway.id") {
		doc.Errorf("gateway.id", "must not be empty (this gateway's id, such as gw-01)")
	}
	c.validateMetrics(doc)
	if len(c.Buses) == 0 && len(c.SerialSensors) == 0 {
		doc.Errorf("buses", "the site has no buses and no serial_sensors: nothing to poll")
	}
	names := map[string]string{} // device name → field path, unique per site
	unique := func(field, name string) {
		if prev, dup := names[name]; dup {
			doc.Errorf(field, "name %q is already used by %s (device names become DeviceId and must be unique)", name, prev)
			return
		}
		names[name] = field
	}
	busNames := map[string]int{}
	ports := map[string]string{}
	for i := range c.Buses {
		b := &c.Buses[i]
		f := fmt.Sprintf("buses[%d]", i)
		if k, dup := busNames[b.Name]; dup {
			doc.Errorf(f+".name", "bus name %q is already used by buses[%d] (bus names must be unique)", b.Name, k)
		} else {
			busNames[b.Name] = i
		}
		ep, err := modbus.ParseURL(b.URL)
		if err != nil && b.URL != "" {
			doc.Errorf(f+".url", "%v", err)
		}
		if err == nil {
			if prev, dup := ports[ep.Port()]; dup {
				doc.Errorf(f+".url", "%s is already used by %s: one bus per port", ep.Port(), prev)
			}
			ports[ep.Port()] = f
		}
		b.defaults(ep.Serial())
		if b.Timeout <= 0 || b.Timeout > maxTimeout {
			doc.Errorf(f+".timeout", "must be between 1ms and %v, got %v", maxTimeout, b.Timeout)
		}
		if *b.Turnaround < 0 || *b.Turnaround > maxTimeout {
			doc.Errorf(f+".turnaround", "must be between 0 and %v, got %v", maxTimeout, *b.Turnaround)
		}
		if b.MaxGap != nil && (*b.MaxGap < 0 || *b.MaxGap > 124) {
			doc.Errorf(f+".max_gap", "must be 0..124 registers, got %d", *b.MaxGap)
		}
		if b.Backoff < b.Timeout {
			doc.Errorf(f+".backoff", "must be at least the timeout (%v), got %v", b.Timeout, b.Backoff)
		}
		if len(b.Devices) == 0 {
			doc.Errorf(f+".devices", "bus %q has no devices (list at least one under devices:, or remove the bus)", b.Name)
		}
		slaves := map[int]int{}
		for j := range b.Devices {
			d := &b.Devices[j]
			df := fmt.Sprintf("%s.devices[%d]", f, j)
			unique(df+".name", d.Name)
			if d.Slave < 1 || d.Slave > 247 {
				doc.Errorf(df+".slave", "must be 1..247 (0 is broadcast, 248-255 reserved), got %d", d.Slave)
			} else if k, dup := slaves[d.Slave]; dup {
				doc.Errorf(df+".slave", "slave %d is already used on this bus by devices[%d] (each device on a bus needs its own slave id, 1..247)", d.Slave, k)
			} else {
				slaves[d.Slave] = j
			}
			p := c.profileFor(doc, df+".profile", d.Profile, false)
			c.deviceDefaults(doc, df, &d.Interval, &d.DataType, p)
			c.devicePoints(doc, df, d, p)
			e := d.Exception()
			checkException(doc, df, &e, d.Interval, nil)
			if d.Heartbeat == 0 && d.ReportsByException() {
				d.Heartbeat = DefaultHeartbeat
			}
			if p != nil && p.Serial != nil && err == nil && ep.Serial() {
				if w := serialMismatch(ep, p.Serial); w != "" {
					line, _ := doc.Line(df + ".profile")
					c.Warnings = append(c.Warnings, fmt.Sprintf("%s:%d: %s: profile %s ships with %s but the bus runs %s; fine if the device was reconfigured",
						c.File, line, df, p.Name, w, ep.LineSettings()))
				}
			}
		}
	}
	for i := range c.SerialSensors {
		s := &c.SerialSensors[i]
		f := fmt.Sprintf("serial_sensors[%d]", i)
		unique(f+".name", s.Name)
		if _, err := ParseSerialURL(s.URL); err != nil && s.URL != "" {
			doc.Errorf(f+".url", "%v", err)
		} else if err == nil {
			sp, _ := ParseSerialURL(s.URL)
			if prev, dup := ports[sp.Path]; dup {
				doc.Errorf(f+".url", "%s is already used by %s: one reader per port", sp.Path, prev)
			}
			ports[sp.Path] = f
		}
		p := c.profileFor(doc, f+".profile", s.Profile, true)
		if s.Interval < 0 {
			doc.Errorf(f+".interval", "must be 0 (a packet per line) or positive, got %v", s.Interval)
		}
		if s.DataType == "" && p != nil {
			s.DataType = p.DataType
		}
	}
}

// validateMetrics checks metrics.listen as far as it can without binding:
// a host:port, and a loopback address unless allow_remote is set (host
// names are checked by the address they bind, when the gateway starts).
func (c *Config) validateMetrics(doc *yamlconf.Doc) {
	m := c.Metrics
	if m.Listen == "off" {
		return
	}
	host, port, err := net.SplitHostPort(m.Listen)
	if err != nil {
		doc.Errorf("metrics.listen", "%q is not host:port (valid: host:port such as 127.0.0.1:9273, or off)", m.Listen)
		return
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		doc.Errorf("metrics.listen", "port %q must be a number from 0 to 65535 (such as 127.0.0.1:9273)", port)
	}
	if m.AllowRemote {
		return
	}
	if host == "" {
		doc.Errorf("metrics.listen", "%q listens on every interface; use a loopback address such as 127.0.0.1:9273, or set metrics.allow_remote: true", m.Listen)
	} else if ip, err := netip.ParseAddr(host); err == nil && !ip.Unmap().IsLoopback() {
		doc.Errorf("metrics.listen", "%s is not a loopback address; use one such as 127.0.0.1:9273, or set metrics.allow_remote: true", host)
	}
}

// metricsDefaults resolves the token file once the buffer's path is known.
func (c *Config) metricsDefaults() {
	m := &c.Metrics
	if m.TokenFile == "" {
		m.TokenFile = filepath.Join(filepath.Dir(c.Buffer.Path), DefaultTokenFile)
	} else {
		m.TokenFile = c.rel(m.TokenFile)
	}
	if m.ScrapeToken && !m.AllowRemote {
		c.Warnings = append(c.Warnings, c.File+": metrics.scrape_token has no effect without metrics.allow_remote: the listener is loopback only, where no token is asked")
	}
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

func (c *Config) profileFor(doc *yamlconf.Doc, f, name string, line bool) *profile.Profile {
	if name == "" {
		return nil
	}
	p, ok := c.Profiles[name]
	if !ok && c.brokenProfiles[name] {
		return nil // its own errors are reported
	}
	if !ok {
		doc.Errorf(f, "unknown profile %q%s (known: %s; gateway profiles lists them)", name, yamlconf.DidYouMean(name, c.Profiles.Names()), strings.Join(c.Profiles.Names(), ", "))
		return nil
	}
	if line && !p.IsLine() {
		doc.Errorf(f, "profile %q is a Modbus register map; serial_sensors need a line profile", name)
		return nil
	}
	if !line && p.IsLine() {
		doc.Errorf(f, "profile %q is a line (serial text) profile; put the device under serial_sensors", name)
		return nil
	}
	return p
}

func (c *Config) deviceDefaults(doc *yamlconf.Doc, f string, interval *time.Duration, dataType *string, p *profile.Profile) {
	if *interval == 0 {
		*interval = 10 * time.Second
		if p != nil && p.Interval > 0 {
			*interval = p.Interval
		}
	}
	if *interval < minInterval {
		doc.Errorf(f+".interval", "must be at least %v, got %v", minInterval, *interval)
	}
	if *dataType == "" && p != nil {
		*dataType = p.DataType
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

// SerialPort is a parsed serial:// URL of a line sensor.
type SerialPort struct {
	Path     string
	Baud     int
	Parity   byte // N, E or O
	DataBits int
	StopBits int
}

// ParseSerialURL parses serial:///dev/ttyS1?baud=4800&parity=N&data_bits=8&stop_bits=1
// (defaults 9600, N, 8, 1).
func ParseSerialURL(raw string) (SerialPort, error) {
	sp := SerialPort{Baud: 9600, Parity: 'N', DataBits: 8, StopBits: 1}
	u, err := url.Parse(raw)
	if err != nil {
		return sp, fmt.Errorf("serial URL %q: %v", raw, err)
	}
	if u.Scheme != "serial" {
		return sp, fmt.Errorf("serial URL %q: scheme must be serial (serial:///dev/ttyS1?baud=4800)", raw)
	}
	if u.Host != "" || u.Path == "" {
		return sp, fmt.Errorf("serial URL %q: give the device path after serial:// as in serial:///dev/ttyS1", raw)
	}
	sp.Path = u.Path
	for k, v := range u.Query() {
		val := v[len(v)-1]
		n, numErr := strconv.Atoi(val)
		switch k {
		case "baud":
			if numErr != nil || n < 300 || n > 4000000 {
				return sp, fmt.Errorf("serial URL %q: baud must be a number such as 4800 or 9600, got %q", raw, val)
			}
			sp.Baud = n
		case "parity":
			if val != "N" && val != "E" && val != "O" {
				return sp, fmt.Errorf("serial URL %q: parity must be N, E or O, got %q", raw, val)
			}
			sp.Parity = val[0]
		case "data_bits":
			if numErr != nil || (n != 7 && n != 8) {
				return sp, fmt.Errorf("serial URL %q: data_bits must be 7 or 8, got %q", raw, val)
			}
			sp.DataBits = n
		case "stop_bits":
			if numErr != nil || (n != 1 && n != 2) {
				return sp, fmt.Errorf("serial URL %q: stop_bits must be 1 or 2, got %q", raw, val)
			}
			sp.StopBits = n
		default:
			keys := []string{"baud", "parity", "data_bits", "stop_bits"}
			return sp, fmt.Errorf("serial URL %q: unknown setting %q (valid: %s)", raw, k, strings.Join(keys, ", "))
		}
	}
	return sp, nil
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
		checkException(doc, pf, &Exception{pt.Deadband, pt.DeadbandPercent, pt.Heartbeat}, d.Interval, r)
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

// zoneinfoDir is where the field binary finds time zones (it carries none
// of its own); tests point it elsewhere.
var zoneinfoDir = "/usr/share/zoneinfo"

// zoneHint says what to do about a time zone that does not load: name it
// right, or give the system its time zone database.
func zoneHint() string {
	if _, err := os.Stat(zoneinfoDir); err != nil && os.Getenv("ZONEINFO") == "" {
		return "this system has no time zone database (" + zoneinfoDir + "): install the tzdata package, or set ZONEINFO to a zoneinfo.zip"
	}
	return "use an IANA name such as Asia/Shanghai or UTC"
}
