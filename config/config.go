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
	"os"
	"path/filepath"
	"strings"
	"time"

	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/modbus/spec"
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
		c.Metrics.Listen = DefaultMetricsListen
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
		if b.MaxGap != nil && (*b.MaxGap < 0 || *b.MaxGap > spec.MaxReadRegisters-1) {
			doc.Errorf(f+".max_gap", "must be 0..%d registers, got %d", spec.MaxReadRegisters-1, *b.MaxGap)
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
			e := d.ReportByException()
			checkReportByException(doc, df, &e, d.Interval, nil)
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

func (c *Config) profileFor(doc *yamlconf.Doc, f, name string, line bool) *profile.Profile {
	if name == "" {
		return nil
	}
	p, ok := c.Profiles[name]
	if !ok && c.brokenProfiles[name] {
		return nil // its own errors are reported
	}
	if !ok {
		doc.Errorf(f, "unknown profile %q%s (nearest: %s; gateway profiles lists them all)", name, yamlconf.DidYouMean(name, c.Profiles.Names()), strings.Join(yamlconf.Nearest(name, c.Profiles.Names(), 3), ", "))
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
