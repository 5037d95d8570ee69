package status

import (
	"fieldlink/internal/words"
	"time"

	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
)

// Snapshot is what the page shows, and what /status.json serves. Times are
// RFC 3339; durations and ages are in seconds; a figure with no sample yet
// is null, never 0, and a text with nothing to say (a healthy device's why,
// a bus without a cause) is null: every key is always there, as
// docs/schema/status.schema.json requires.
type Snapshot struct {
	Generated time.Time `json:"generated"`
	Site      Identity  `json:"site"`
	Clock     Clock     `json:"clock"`
	// Summary counts what needs a look, for the page's headline.
	Summary  Summary   `json:"summary"`
	Buses    []Bus     `json:"buses"`
	Devices  []Device  `json:"devices"`
	Buffer   *Buffer   `json:"buffer"`   // null without an uplink
	Uplink   *Uplink   `json:"uplink"`   // null without an uplink
	Downlink *Downlink `json:"downlink"` // null without a downlink
}

// Summary counts the devices, points and upstreams that are not well.
type Summary struct {
	Devices       int `json:"devices"`
	DevicesNotOK  int `json:"devices_not_ok"`
	Points        int `json:"points"`
	PointsNotGood int `json:"points_not_good"`
	// PointsInAlarm counts the points whose last reading is past an alarm
	// threshold.
	PointsInAlarm int `json:"points_in_alarm"`
	// UpstreamsDown counts the upstreams that do not deliver: down, or
	// failing (up, their deliveries refused), which UpstreamsFailing
	// counts apart. UpstreamsActive are those up.
	UpstreamsDown    int `json:"upstreams_down"`
	UpstreamsActive  int `json:"upstreams_active"`
	UpstreamsFailing int `json:"upstreams_failing"`
	// NothingDeliveredSeconds is how long nothing was delivered while
	// packets wait: set once the oldest waiting packet and the last
	// delivery (or the start) are both at least [StallAfter] old; null
	// otherwise.
	NothingDeliveredSeconds *float64 `json:"nothing_delivered_s"`
}

// StallAfter is how long packets may wait with nothing delivered before
// the page's headline says so: long enough for a broker's reconnect or a
// burst after an outage, short enough that a technician on site sees it.
const StallAfter = 30 * time.Second

// Identity is who the gateway is, at which site, and what it runs.
type Identity struct {
	ID            string    `json:"id"`
	Gateway       string    `json:"gateway"`
	Version       string    `json:"version"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_s"`
	Config        Config    `json:"config"`
	// LastReload is null when the site file was not reloaded since the
	// start.
	LastReload *Reload `json:"last_reload"`
	// Remote is the remote configuration's last report; null without
	// remote_config.
	Remote *Remote `json:"remote_config"`
	loc    *time.Location
}

// Remote is what the remote configuration last did with a bundle.
type Remote struct {
	Serial uint64    `json:"serial"`
	State  string    `json:"state"`
	Reason *string   `json:"reason"`
	At     time.Time `json:"at"`
}

// Config is the site file in force and the one on disk.
type Config struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	// OnDiskSHA256 is the file on disk now; Changed says it differs from
	// the one in force (edited, and not yet or not successfully reloaded).
	OnDiskSHA256 *string `json:"on_disk_sha256"`
	OnDiskError  *string `json:"on_disk_error"`
	Changed      bool    `json:"changed"`
}

// Reload is the outcome of the latest reload.
type Reload struct {
	At      time.Time `json:"at"`
	Applied bool      `json:"applied"`
	Error   *string   `json:"error"`
}

// Clock is whether the system clock can be trusted: a gateway without a
// real-time clock that boots without network stamps its packets with a
// wrong date until NTP sets it.
type Clock struct {
	Now time.Time `json:"now"`
	// Synchronised is the kernel's NTP state, as timedatectl reports it
	// (its maximum error below 16 s); null when it cannot be read.
	Synchronised   *bool    `json:"synchronised"`
	MaxErrorSecond *float64 `json:"max_error_s"`
	// Problem says what is wrong, in words; "" when nothing is.
	Problem *string `json:"problem"`
}

// build reads every source once and makes the snapshot at now.
func (s *Server) build(now time.Time) *Snapshot {
	src := s.src
	snap := &Snapshot{Generated: now.UTC(), Clock: s.clock(now)}
	if src.Identity != nil {
		snap.Site = identity(src.Identity(), now)
	}
	var devs []sensors.DeviceStatus
	if src.Devices != nil {
		devs = src.Devices()
	}
	var readings []sensors.Reading
	if src.Readings != nil {
		readings = src.Readings(now)
	}
	snap.Devices = devices(devs, readings, now)
	var mb map[string]modbus.Stats
	if src.Modbus != nil {
		mb = src.Modbus()
	}
	var samples []sensors.BusSample
	if src.Buses != nil {
		samples = src.Buses()
	}
	busy := map[string]time.Duration{}
	for _, b := range samples {
		busy[b.Name] = b.Busy
	}
	var delivered map[string]uint64
	if src.Delivery != nil {
		if st, ok := src.Delivery(); ok {
			delivered = map[string]uint64{}
			for _, u := range st.Upstreams {
				delivered[u.Name] += u.Delivered
			}
		}
	}
	past := s.window.add(now, busy, delivered)
	snap.Buses = buses(samples, mb, devs, past, now, snap.Site.Started)
	// A bus's cause is said at the bus, not again under each device.
	for _, b := range snap.Buses {
		if b.Cause == nil {
			continue
		}
		for i, d := range snap.Devices {
			if d.Bus == b.Name && d.Kind == "modbus" && d.Why != nil && (d.Health != "unknown" || b.DownSince != nil) {
				snap.Devices[i].Why = text(whyOnBus(d))
			}
		}
	}
	snap.Buffer = s.buffer(now)
	snap.Uplink = s.uplink(past, now)
	if src.Downlink != nil {
		d := src.Downlink()
		dl := &Downlink{Enabled: d.Enabled, Unsigned: d.Unsigned, Commands: []Command{}}
		for _, c := range d.Commands {
			dl.Commands = append(dl.Commands, Command{At: c.At.UTC(), Device: c.Device, Command: c.Command, OK: c.OK, Result: c.Result})
		}
		snap.Downlink = dl
	}
	snap.Summary = summarise(snap)
	snap.Summary.NothingDeliveredSeconds = s.stalled(snap, now)
	return snap
}

func identity(si GatewayIdentity, now time.Time) Identity {
	st := Identity{
		ID: si.SiteID, Gateway: si.GatewayID, Version: si.Version, Started: si.Started.UTC(), loc: si.Location,
		Config: Config{File: si.ConfigFile, SHA256: si.ConfigSHA256, OnDiskSHA256: text(si.OnDiskSHA256), OnDiskError: text(si.OnDiskError)},
	}
	if !si.Started.IsZero() {
		st.UptimeSeconds = seconds(now.Sub(si.Started))
	}
	st.Config.Changed = si.OnDiskSHA256 != "" && si.OnDiskSHA256 != si.ConfigSHA256
	if r := si.LastReload; r != nil {
		st.LastReload = &Reload{At: r.At.UTC(), Applied: r.Err == "", Error: text(r.Err)}
	}
	if r := si.Remote; r != nil {
		st.Remote = &Remote{Serial: r.Serial, State: r.State, Reason: text(r.Reason), At: r.At.UTC()}
	}
	return st
}

// stalled is how long nothing was delivered while packets wait, once
// that and the oldest waiting packet's age are both StallAfter or more;
// nil otherwise. Before the first delivery it counts from the start.
func (s *Server) stalled(snap *Snapshot, now time.Time) *float64 {
	b, u := snap.Buffer, snap.Uplink
	if b == nil || u == nil || b.Waiting == 0 || b.OldestAgeSeconds == nil || *b.OldestAgeSeconds < StallAfter.Seconds() {
		return nil
	}
	since := u.lastDelivered
	if since.IsZero() {
		since = snap.Site.Started
	}
	if since.IsZero() {
		return nil
	}
	if d := now.Sub(since); d >= StallAfter {
		return ptr(seconds(d))
	}
	return nil
}

func summarise(s *Snapshot) Summary {
	var sum Summary
	for _, d := range s.Devices {
		sum.Devices++
		if d.Health != "ok" {
			sum.DevicesNotOK++
		}
		for _, p := range d.Points {
			sum.Points++
			if p.Quality != "good" {
				sum.PointsNotGood++
			}
			if p.Alarm {
				sum.PointsInAlarm++
			}
		}
	}
	if s.Uplink != nil {
		for _, u := range s.Uplink.Upstreams {
			switch u.State {
			case "up":
				sum.UpstreamsActive++
			case "failing":
				sum.UpstreamsFailing++
				sum.UpstreamsDown++
			case "down":
				sum.UpstreamsDown++
			}
		}
	}
	return sum
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func ptr[T any](v T) *T { return &v }

// text is s, or nil (JSON null) when s is empty.
func text(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// str is *s, or "" when s is nil.
func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// timePtr is t in UTC, nil for the zero time.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func plural(n int, what string) string { return words.Count(n, what) }
