package config

import (
	"fmt"
	"strings"
	"time"

	"fieldlink/internal/yamlconf"
)

// Downlink defaults: one place.
const (
	DefaultCommandTopic = "fieldlink/{site}/{gateway}/cmd"
	DefaultResultTopic  = "fieldlink/{site}/{gateway}/cmd/result"
	DefaultMaxAge       = time.Minute
	// MaxMaxAge bounds max_age below the 24 hours command ids are kept, so
	// that an id forgotten is also an id too old to run.
	MaxMaxAge = 12 * time.Hour
	// minInterlockAge is the shortest default max_age of an interlock.
	minInterlockAge = 10 * time.Second
)

// Downlink lets the platform write to the site's actuators. Off unless
// enabled; only points a device lists under writable can be written.
type Downlink struct {
	// Enabled: no command is accepted unless true.
	Enabled bool `yaml:"enabled"`
	// Topic the commands arrive on, from every MQTT upstream; {site} and
	// {gateway} are filled in. Default DefaultCommandTopic.
	Topic string `yaml:"topic"`
	// ResultTopic the outcomes are published on; default DefaultResultTopic.
	ResultTopic string `yaml:"result_topic"`
	// MaxAge refuses commands issued longer ago; default one minute.
	MaxAge time.Duration `yaml:"max_age"`
	// Keys are Ed25519 public key files; when set, only commands signed by
	// one of them run.
	Keys []string `yaml:"keys"`
	// AllowUnsigned lets an enabled downlink without Keys run: its
	// commands are then unsigned, and anyone who can publish on the
	// command topic can write to the devices. Default false: gateway
	// check refuses such a site file.
	AllowUnsigned bool `yaml:"allow_unsigned"`
}

// Writable is one point of a device that commands may write.
type Writable struct {
	Point string `yaml:"point,required"`
	// Min and Max bound the value in engineering units.
	Min *float64 `yaml:"min"`
	Max *float64 `yaml:"max"`
	// Step: the value must be Min (or 0) plus a whole number of steps; the
	// read-back may differ from the value by at most one step.
	Step float64 `yaml:"step"`
	// Idempotent points may be retried when a write's outcome is unknown:
	// writing the same value twice does no harm. Never for a pulse or a
	// counter.
	Idempotent bool        `yaml:"idempotent"`
	Interlock  []Interlock `yaml:"interlock"`
}

// Interlock makes a write wait on another point's reading: the write is
// denied unless that point was read within MaxAge and is above Above
// and/or below Below.
type Interlock struct {
	Device string   `yaml:"device,required"`
	Point  string   `yaml:"point,required"`
	Above  *float64 `yaml:"above"`
	Below  *float64 `yaml:"below"`
	// MaxAge of the reading; default twice the device's interval, at
	// least 10s.
	MaxAge time.Duration `yaml:"max_age"`
}

// validateDownlink checks the downlink section and every writable list:
// points that exist, are writable in their profile and are not safety
// registers; interlocks on points that exist.
func (c *Config) validateDownlink(doc *yamlconf.Doc) {
	d := &c.Downlink
	if d.Topic == "" {
		d.Topic = DefaultCommandTopic
	}
	if d.ResultTopic == "" {
		d.ResultTopic = DefaultResultTopic
	}
	if d.MaxAge == 0 {
		d.MaxAge = DefaultMaxAge
	}
	for f, t := range map[string]string{"downlink.topic": d.Topic, "downlink.result_topic": d.ResultTopic} {
		if strings.ContainsAny(t, "+#\x00") {
			doc.Errorf(f, "%q: '+', '#' and NUL are not allowed in a topic", t)
		}
	}
	if d.Topic == d.ResultTopic {
		doc.Errorf("downlink.result_topic", "must differ from downlink.topic (%q): the gateway would read its own results as commands", d.Topic)
	}
	if d.MaxAge < time.Second || d.MaxAge > MaxMaxAge {
		doc.Errorf("downlink.max_age", "must be between 1s and %v, got %v", MaxMaxAge, d.MaxAge)
	}
	for i, k := range d.Keys {
		if err := readable(c.rel(k)); err != nil {
			doc.Errorf(fmt.Sprintf("downlink.keys[%d]", i), "%v (give an Ed25519 public key file written by gateway keygen)", err)
		}
	}
	hasMQTT := false
	if c.Uplink != nil {
		for _, u := range c.Uplink.Upstreams {
			if s, err := UpstreamScheme(u.URL); err == nil && strings.HasPrefix(s, "mqtt") {
				hasMQTT = true
			}
		}
	}
	writable := 0
	for i := range c.Buses {
		for j := range c.Buses[i].Devices {
			dev := &c.Buses[i].Devices[j]
			df := fmt.Sprintf("buses[%d].devices[%d]", i, j)
			p := c.Profiles[dev.Profile]
			seen := map[string]bool{}
			for k := range dev.Writable {
				w := &dev.Writable[k]
				wf := fmt.Sprintf("%s.writable[%d]", df, k)
				writable++
				if seen[w.Point] {
					doc.Errorf(wf+".point", "point %q is listed twice", w.Point)
				}
				seen[w.Point] = true
				if p != nil {
					r, ok := p.Register(w.Point)
					switch {
					case !ok:
						doc.Errorf(wf+".point", "profile %s has no point %q", p.Name, w.Point)
					case r.Safety:
						doc.Errorf(wf+".point", "%s is a safety register of profile %s: the gateway never writes it (safety functions belong to certified equipment)", w.Point, p.Name)
					case !r.Writable():
						doc.Errorf(wf+".point", "%s is read-only in profile %s (the profile gives no write: for it)", w.Point, p.Name)
					}
				}
				if w.Min != nil && w.Max != nil && *w.Min > *w.Max {
					doc.Errorf(wf+".max", "must be ≥ min (%g), got %g", *w.Min, *w.Max)
				}
				if w.Step < 0 {
					doc.Errorf(wf+".step", "must not be negative, got %g", w.Step)
				}
				for m := range w.Interlock {
					c.validateInterlock(doc, fmt.Sprintf("%s.interlock[%d]", wf, m), &w.Interlock[m])
				}
			}
		}
	}
	if d.Enabled && c.Uplink == nil {
		doc.Errorf("downlink.enabled", "the downlink needs an uplink: commands arrive from its MQTT upstreams, and their ids and audit log are kept in its buffer file")
	}
	if d.Enabled && !hasMQTT && c.Uplink != nil {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s: downlink is enabled but no upstream is MQTT: commands arrive only by gateway write", c.File))
	}
	switch {
	case d.Enabled && len(d.Keys) == 0 && !d.AllowUnsigned:
		doc.Errorf("downlink.enabled", "the downlink has no keys: it would run unsigned commands from anyone who can publish on %s; "+
			"give downlink.keys (public keys written by gateway keygen), or set downlink.allow_unsigned: true to run unsigned commands", d.Topic)
	case d.Enabled && len(d.Keys) == 0:
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s: downlink runs unsigned commands (downlink.allow_unsigned: true): anyone who can publish on %s can write to the devices; give downlink.keys", c.File, d.Topic))
	case d.AllowUnsigned && len(d.Keys) > 0:
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s: downlink.allow_unsigned has no effect with downlink.keys: only signed commands run", c.File))
	}
	if d.Enabled && writable == 0 {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s: downlink is enabled but no device lists a writable point: every command will be rejected", c.File))
	}
}

func (c *Config) validateInterlock(doc *yamlconf.Doc, f string, il *Interlock) {
	if il.Above == nil && il.Below == nil {
		doc.Errorf(f, "give above, below or both: the condition the point must meet for the write to run")
	}
	if il.MaxAge < 0 {
		doc.Errorf(f+".max_age", "must not be negative, got %v", il.MaxAge)
	}
	dev, interval := c.findDevice(il.Device)
	switch {
	case dev == "":
		doc.Errorf(f+".device", "no device %q in this site", il.Device)
	case !c.hasPoint(dev, il.Point):
		doc.Errorf(f+".point", "device %s has no point %q", il.Device, il.Point)
	}
	if il.MaxAge == 0 {
		il.MaxAge = max(minInterlockAge, 2*interval)
	}
}

// findDevice returns the profile name and interval of the named device or
// serial sensor, "" when there is none.
func (c *Config) findDevice(name string) (prof string, interval time.Duration) {
	for _, b := range c.Buses {
		for _, d := range b.Devices {
			if d.Name == name {
				return d.Profile, d.Interval
			}
		}
	}
	for _, s := range c.SerialSensors {
		if s.Name == name {
			return s.Profile, s.Interval
		}
	}
	return "", 0
}

func (c *Config) hasPoint(prof, point string) bool {
	p := c.Profiles[prof]
	if p == nil {
		return true // reported as an unknown profile already
	}
	if p.IsLine() {
		for _, f := range p.Line.Fields {
			if f.Name == point {
				return true
			}
		}
		return false
	}
	_, ok := p.Register(point)
	return ok
}
