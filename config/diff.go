package config

import (
	"bytes"
	"encoding/json"
)

// Change is what differs between two site files, as a running gateway
// sees it (see [Diff]).
type Change struct {
	// Restart names what a reload cannot apply to a running gateway: the
	// buffer (its file is open), the metrics listener, whether there is a
	// remote configuration (its manager runs from the start) and whether
	// there is an uplink at all.
	Restart []string
	// Sensors: anything the pollers or the packets depend on — the site's
	// identity and time zone, buses, devices, serial sensors, the packet
	// encoding, or a firmware profile's content.
	Sensors bool
	// Uplink: the uplink's settings, the downlink's or the remote
	// configuration's topics (subscribed by the upstreams), or the site
	// and gateway ids the topics use. Passwords behind password_file and password_env are not part of
	// a Config; the caller compares those.
	Uplink bool
}

// Diff compares a running configuration a with a new one b. Parts are
// compared by their canonical JSON encoding: every setting is an exported
// field, and derived state (compiled regular expressions, loaded time
// zones) is not, so two loads of the same file compare equal.
func Diff(a, b *Config) Change {
	var c Change
	if !same(a.Buffer, b.Buffer) {
		c.Restart = append(c.Restart, "buffer")
	}
	if !same(a.Metrics, b.Metrics) {
		c.Restart = append(c.Restart, "metrics")
	}
	// The remote configuration's manager takes its url, interval, keys and
	// probation from a reread file (fleet.Manager.SetLocal); its topics
	// are the uplink's. Only starting or stopping it needs a restart.
	ra, rb := a.RemoteConfig, b.RemoteConfig
	if (ra == nil) != (rb == nil) {
		c.Restart = append(c.Restart, "remote_config added or removed")
	}
	topicsChanged := ra != nil && rb != nil && (ra.PullTopic != rb.PullTopic || ra.StateTopic != rb.StateTopic)
	if (a.Uplink == nil) != (b.Uplink == nil) {
		c.Restart = append(c.Restart, "uplink added or removed")
	}
	c.Sensors = a.Site != b.Site || a.Gateway != b.Gateway || a.Packet != b.Packet ||
		!same(a.Buses, b.Buses) || !same(a.SerialSensors, b.SerialSensors) || !same(a.Profiles, b.Profiles)
	c.Uplink = a.Site.ID != b.Site.ID || a.Gateway.ID != b.Gateway.ID || !same(a.Uplink, b.Uplink) || !same(a.Downlink, b.Downlink) || topicsChanged ||
		c.Sensors && b.sparkplugNode() // its births list the devices and their points
	return c
}

// same reports whether x and y encode to the same JSON. A value that does
// not encode counts as changed.
func same(x, y any) bool {
	bx, errx := json.Marshal(x)
	by, erry := json.Marshal(y)
	return errx == nil && erry == nil && bytes.Equal(bx, by)
}
