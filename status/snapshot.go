package status

import (
	"encoding/hex"
	"strings"
	"time"

	"fieldlink/metrics"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/uplink"
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
	Devices         int `json:"devices"`
	DevicesNotOK    int `json:"devices_not_ok"`
	Points          int `json:"points"`
	PointsNotGood   int `json:"points_not_good"`
	UpstreamsDown   int `json:"upstreams_down"`
	UpstreamsActive int `json:"upstreams_active"`
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

// Bus is one bus and its Modbus client's counters.
type Bus struct {
	Name string `json:"name"`
	// State is ok (every device answers), degraded (some fail), down (none
	// answers) or starting (none polled yet).
	State     string `json:"state"`
	Devices   int    `json:"devices"`
	Requests  uint64 `json:"requests"`
	Responses uint64 `json:"responses"`
	// Errors are the failed exchanges by kind.
	Errors   BusErrors `json:"errors"`
	Overruns uint64    `json:"overruns"`
	// Cause is why the bus is down, in words, when no device answers and
	// every failing one fails for the same reason on the link (its
	// address refuses connections, its serial port is missing): said once
	// here rather than under each device.
	Cause *string `json:"cause"`
	// LastRoundTripSeconds is the latest successful poll's time on the
	// wire (all its requests), of LastRoundTripDevice.
	LastRoundTripSeconds *float64 `json:"last_round_trip_s"`
	LastRoundTripDevice  *string  `json:"last_round_trip_device"`
	// Utilisation is the share of wall time the bus was busy polling (0 to
	// 1) over the last UtilisationWindowSeconds.
	Utilisation              *float64 `json:"utilisation"`
	UtilisationWindowSeconds float64  `json:"utilisation_window_s"`
}

// BusErrors are a bus's failed exchanges by kind.
type BusErrors struct {
	Timeout   uint64 `json:"timeout"`
	CRC       uint64 `json:"crc"`
	Exception uint64 `json:"exception"`
	Framing   uint64 `json:"framing"`
	IO        uint64 `json:"io"`
}

// Device is one Modbus device or serial sensor.
type Device struct {
	Name string `json:"name"`
	Bus  string `json:"bus"`
	// Kind is modbus, or serial for a line sensor.
	Kind string `json:"kind"`
	// Health is unknown (not polled yet), ok, degraded (failing) or
	// offline (failing in a row: backed off); Why says why in words.
	Health string  `json:"health"`
	Why    *string `json:"why"`
	// LastError is the last failed poll's error as the driver gave it.
	LastError           *string    `json:"last_error"`
	ConsecutiveFailures int        `json:"failures_in_row"`
	Polls               uint64     `json:"polls"`
	Errors              uint64     `json:"errors"`
	LastOK              *time.Time `json:"last_ok"`
	LastPollSeconds     *float64   `json:"last_poll_s"`
	Points              []Point    `json:"points"`
}

// Point is the last reading of one point. Value is set only while the
// quality is good: a stale or bad point has a null value, and its last
// reading, if any, apart in LastValue, so that no client shows it as a
// current number.
type Point struct {
	Name    string  `json:"name"`
	Unit    *string `json:"unit"`
	Value   *string `json:"value"`
	Quality string  `json:"quality"`
	// AgeSeconds is the age of the last reading; null when never read.
	AgeSeconds *float64   `json:"age_s"`
	At         *time.Time `json:"at"`
	LastValue  *string    `json:"last_value"`
	// Raw is the wire bytes of the last reading in hex, two bytes per
	// register ("00 7d"); "" for a serial sensor's field.
	Raw *string `json:"raw"`
}

// Buffer is the store-and-forward queue.
type Buffer struct {
	Waiting          int      `json:"waiting"`
	Alarms           int      `json:"alarms"`
	Leased           int      `json:"leased"`
	OldestAgeSeconds *float64 `json:"oldest_age_s"`
	Bytes            int64    `json:"bytes"`
	MaxBytes         int64    `json:"max_bytes"`
	FileSize         int64    `json:"file_size"`
	Evicted          uint64   `json:"evicted"`
	Rejected         uint64   `json:"rejected"`
	DeadLetters      uint64   `json:"dead_letters"`
	// DiskFree and DiskTotal are of the file system holding the buffer;
	// null when unknown.
	DiskFree    *uint64    `json:"disk_free"`
	DiskTotal   *uint64    `json:"disk_total"`
	LastError   *string    `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
	// Durable: packets are stored on the card before they count as taken.
	// Durability is ok, slow, io_error, read_only or full, Problem says it
	// in words (null when ok) and Since when it began; Volatile counts the
	// packets waiting in memory meanwhile (see metrics.Durability).
	Durable           bool       `json:"durable"`
	Durability        string     `json:"durability"`
	DurabilityProblem *string    `json:"durability_problem"`
	DurabilitySince   *time.Time `json:"durability_since"`
	Volatile          int        `json:"volatile"`
}

// Uplink is the delivery side.
type Uplink struct {
	Selector     string `json:"selector"`
	Delivered    uint64 `json:"delivered"`
	Retried      uint64 `json:"retried"`
	Released     uint64 `json:"released"`
	DeadLettered uint64 `json:"dead_lettered"`
	// ShareWindowSeconds is the window of each upstream's Share.
	ShareWindowSeconds float64    `json:"share_window_s"`
	Upstreams          []Upstream `json:"upstreams"`
	lastDelivered      time.Time
}

// Upstream is one MQTT broker or HTTP endpoint, by its credential-free
// name.
type Upstream struct {
	Name string `json:"name"`
	// State is up, down or retired.
	State string `json:"state"`
	// Share is the upstream's part of the records delivered over the
	// window (0 to 1); null when nothing was delivered in it.
	Share     *float64 `json:"share"`
	Delivered uint64   `json:"delivered"`
	InFlight  int      `json:"in_flight"`
	// LatencySeconds is the mean delivery latency over the latest
	// deliveries; null before the first.
	LatencySeconds      *float64   `json:"latency_s"`
	ConsecutiveFailures uint64     `json:"failures_in_row"`
	Failures            uint64     `json:"failures"`
	Timeouts            uint64     `json:"timeouts"`
	LastFailure         *time.Time `json:"last_failure"`
	// LastFailureTimeout says the last failure was a timeout.
	LastFailureTimeout bool     `json:"last_failure_timeout"`
	ProbeRTTSeconds    *float64 `json:"probe_rtt_s"`
	// LastError is the latest failed connection, probe or delivery, in
	// words, and LastErrorAt when; null when none since the start.
	LastError   *string    `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
}

// Downlink is the state of the downlink.
type Downlink struct {
	Enabled bool `json:"enabled"`
	// Unsigned: commands run without a signature, so anyone who can
	// publish on the broker can write to the devices.
	Unsigned bool      `json:"unsigned"`
	Commands []Command `json:"commands"`
}

// Command is one downlink command.
type Command struct {
	At      time.Time `json:"at"`
	Device  string    `json:"device"`
	Command string    `json:"command"`
	OK      bool      `json:"ok"`
	Result  string    `json:"result"`
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
	var points []sensors.Point
	if src.Points != nil {
		points = src.Points(now)
	}
	snap.Devices = devices(devs, points, now)
	var mb map[string]modbus.Stats
	if src.Modbus != nil {
		mb = src.Modbus()
	}
	var samples []metrics.BusSample
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
			if d.Bus == b.Name && d.Kind == "modbus" && d.Why != nil && d.Health != "unknown" {
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

func identity(si metrics.Identity, now time.Time) Identity {
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

// devices joins each device's status with its points.
func devices(devs []sensors.DeviceStatus, points []sensors.Point, now time.Time) []Device {
	health := map[string]sensors.Health{}
	for _, d := range devs {
		health[d.Name] = d.Health
	}
	byDev := map[string][]Point{}
	for _, p := range points {
		// The points are read a moment after the devices' status: a poll
		// may end in between. The page holds to the status it shows, so a
		// device shown failing has no good point.
		if h, ok := health[p.Device]; ok && p.Quality == sensors.Good && h != sensors.OK {
			p.Quality = sensors.Stale
			if h == sensors.Offline {
				p.Quality = sensors.Bad
			}
		}
		byDev[p.Device] = append(byDev[p.Device], point(p, now))
	}
	out := make([]Device, 0, len(devs))
	for _, d := range devs {
		kind := "modbus"
		if d.Bus == "serial" {
			kind = "serial"
		}
		dev := Device{
			Name: d.Name, Bus: d.Bus, Kind: kind, Health: d.Health.String(), Why: text(why(d)), LastError: text(d.LastError),
			ConsecutiveFailures: d.ConsecutiveFailures, Polls: d.Polls, Errors: d.Errors,
			LastOK: timePtr(d.LastOK), Points: byDev[d.Name],
		}
		if d.Polls > 0 && d.LastDuration > 0 {
			dev.LastPollSeconds = ptr(seconds(d.LastDuration))
		}
		if dev.Points == nil {
			dev.Points = []Point{}
		}
		out = append(out, dev)
	}
	return out
}

// why says in words why a device is not ok.
func why(d sensors.DeviceStatus) string {
	switch d.Health {
	case sensors.Unknown:
		return "not polled yet"
	case sensors.Degraded:
		return "last poll failed: " + d.LastError
	case sensors.Offline:
		return "no answer: " + plural(d.ConsecutiveFailures, "failure") + " in a row, polled less often until it answers; last: " + d.LastError
	}
	return ""
}

// whyOnBus is why a device does not answer when its bus says why.
func whyOnBus(d Device) string {
	if d.Health == "offline" {
		return "no answer: " + plural(d.ConsecutiveFailures, "failure") + " in a row, polled less often until it answers; the bus is down (above)"
	}
	return "last poll failed: the bus is down (above)"
}

func point(p sensors.Point, now time.Time) Point {
	out := Point{Name: p.Name, Unit: text(p.Unit), Quality: p.Quality.String()}
	if p.At.IsZero() {
		return out
	}
	out.At = timePtr(p.At)
	out.AgeSeconds = ptr(max(seconds(now.Sub(p.At)), 0))
	v := p.Value.String()
	if p.Quality == sensors.Good {
		out.Value = &v
	} else {
		out.LastValue = &v
	}
	if len(p.Raw) > 0 {
		out.Raw = text(hexBytes(p.Raw))
	}
	return out
}

// hexBytes is b in hex, a space between registers (two bytes).
func hexBytes(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); i += 2 {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(hex.EncodeToString(b[i:min(i+2, len(b))]))
	}
	return sb.String()
}

func buses(samples []metrics.BusSample, mb map[string]modbus.Stats, devs []sensors.DeviceStatus, past *sample, now, started time.Time) []Bus {
	out := make([]Bus, 0, len(samples))
	for _, smp := range samples {
		b := Bus{Name: smp.Name, Overruns: smp.Overruns}
		if st, ok := mb[smp.Name]; ok {
			b.Requests, b.Responses = st.Requests, st.Responses
			b.Errors = BusErrors{Timeout: st.Timeouts, CRC: st.CRCErrors, Exception: st.Exceptions, Framing: st.FrameErrors, IO: st.IOErrors}
		}
		var n [sensors.Offline + 1]int
		var latest time.Time
		for _, d := range devs {
			if d.Bus != smp.Name || d.Health > sensors.Offline {
				continue
			}
			b.Devices++
			n[d.Health]++
			if d.Health == sensors.OK && d.LastOK.After(latest) {
				latest = d.LastOK
				b.LastRoundTripSeconds, b.LastRoundTripDevice = ptr(seconds(d.LastDuration)), text(d.Name)
			}
		}
		failing := n[sensors.Degraded] + n[sensors.Offline]
		if failing > 0 && n[sensors.OK] == 0 {
			b.Cause = text(busCause(smp.Name, devs))
		}
		switch {
		case n[sensors.Unknown] == b.Devices:
			b.State = "starting"
		case failing == 0:
			b.State = "ok"
		case n[sensors.OK] == 0:
			b.State = "down"
		default:
			b.State = "degraded"
		}
		// Utilisation over the window, or since the start before there is
		// one (or after a reload restarted the bus's count).
		if old, ok := past.busy[smp.Name]; ok && past.at.Before(now) && smp.Busy >= old {
			b.Utilisation = ptr(min(float64(smp.Busy-old)/float64(now.Sub(past.at)), 1))
			b.UtilisationWindowSeconds = seconds(now.Sub(past.at))
		} else if !started.IsZero() && now.After(started) {
			b.Utilisation = ptr(min(float64(smp.Busy)/float64(now.Sub(started)), 1))
			b.UtilisationWindowSeconds = seconds(now.Sub(started))
		}
		out = append(out, b)
	}
	return out
}

func (s *Server) buffer(now time.Time) *Buffer {
	if s.src.Buffer == nil {
		return nil
	}
	st, ok := s.src.Buffer()
	if !ok {
		return nil
	}
	b := &Buffer{
		Waiting: st.Alarms + st.Normal, Alarms: st.Alarms, Leased: st.Leased,
		Bytes: st.Bytes, MaxBytes: st.MaxBytes, FileSize: st.FileSize,
		Evicted: st.EvictedMaxBytes + st.EvictedMaxAge, Rejected: st.RejectedFull, DeadLetters: st.DeadLetters,
		LastError: text(st.LastError), LastErrorAt: timePtr(st.LastErrorAt),
		Durable: true, Durability: "ok",
	}
	if s.src.Durability != nil {
		d := s.src.Durability()
		b.Durable, b.Durability, b.DurabilityProblem, b.Volatile = d.Durable, d.Reason, text(d.Words), d.Volatile
		if d.Reason != "ok" {
			b.DurabilitySince = timePtr(d.Since)
		}
	}
	// The oldest record may be one acknowledged whose deletion waits for
	// the next commit: not counted as waiting, so not aged either.
	if b.Waiting > 0 && st.OldestSeq != 0 && !st.OldestAt.IsZero() {
		b.OldestAgeSeconds = ptr(max(seconds(now.Sub(st.OldestAt)), 0))
	}
	if s.src.Disk != nil {
		if d, ok := s.src.Disk(); ok {
			b.DiskFree, b.DiskTotal = &d.Free, &d.Total
		}
	}
	return b
}

func (s *Server) uplink(past *sample, now time.Time) *Uplink {
	if s.src.Delivery == nil {
		return nil
	}
	del, ok := s.src.Delivery()
	if !ok {
		return nil
	}
	u := &Uplink{Delivered: del.Delivered, Retried: del.Retried, Released: del.Released, DeadLettered: del.DeadLettered, Upstreams: []Upstream{}}
	if s.src.Selector != nil {
		u.Selector = s.src.Selector()
	}
	u.lastDelivered = del.LastDelivered
	delivered := map[string]uint64{}
	lastErr := map[string]uplink.UpstreamCounters{}
	for _, c := range del.Upstreams {
		delivered[c.Name] += c.Delivered
		if c.LastError != "" {
			lastErr[c.Name] = c
		}
	}
	// Each upstream's share of the records delivered over the window, or
	// since the start when there is no window yet (or a reload restarted
	// the counts).
	base := past.delivered
	for name, n := range delivered {
		if base[name] > n {
			base = nil
		}
	}
	if base != nil && past.at.Before(now) {
		u.ShareWindowSeconds = seconds(now.Sub(past.at))
	}
	var total uint64
	for name, n := range delivered {
		total += n - base[name]
	}
	if s.src.Upstreams != nil {
		for _, st := range s.src.Upstreams() {
			up := Upstream{
				Name: st.Name, State: "down", Delivered: delivered[st.Name], InFlight: st.InFlight,
				ConsecutiveFailures: st.ConsecutiveFailures, Failures: st.Failures, Timeouts: st.Timeouts,
				LastFailure: timePtr(st.LastFailure),
			}
			switch {
			case st.Retired:
				up.State = "retired"
			case st.Up:
				up.State = "up"
			}
			if total > 0 {
				up.Share = ptr(float64(delivered[st.Name]-base[st.Name]) / float64(total))
			}
			if st.Samples > 0 {
				up.LatencySeconds = ptr(seconds(st.LatencyMean))
			}
			if !st.LastFailure.IsZero() && !st.LastTimeout.IsZero() && !st.LastTimeout.Before(st.LastFailure) {
				up.LastFailureTimeout = true
			}
			if st.ProbeRTT > 0 {
				up.ProbeRTTSeconds = ptr(seconds(st.ProbeRTT))
			}
			if c, ok := lastErr[st.Name]; ok {
				up.LastError, up.LastErrorAt = ptr(c.LastError), timePtr(c.LastErrorAt)
			}
			u.Upstreams = append(u.Upstreams, up)
		}
	}
	return u
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
		}
	}
	if s.Uplink != nil {
		for _, u := range s.Uplink.Upstreams {
			switch u.State {
			case "up":
				sum.UpstreamsActive++
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

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return itoa(n) + " " + what + "s"
}
