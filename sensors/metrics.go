package sensors

import (
	"fmt"
	"math"
	"strings"
	"time"

	"fieldlink/metrics"
)

// The families of the poll side: per device, per bus, and the readings.
// Poll latency is the device's latest poll as a gauge: a summary or a
// histogram needs a running sum or per-poll buckets, which a snapshot of
// [DeviceStatus] does not carry; the mean poll time of a bus over any range
// is rate(fieldlink_bus_busy_seconds_total) divided by the summed
// rate(fieldlink_device_polls_total) of its devices. Bus utilisation is a
// counter of busy seconds, as node_cpu_seconds_total is for a CPU: rate() of
// it over any window is the fraction of wall time the bus was busy.
var (
	devPolls        = metrics.NewCounter("fieldlink_device_polls_total", "Polls of the device, successful or not.", "bus", "device")
	devErrors       = metrics.NewCounter("fieldlink_device_poll_errors_total", "Polls of the device that failed.", "bus", "device")
	devRequests     = metrics.NewCounter("fieldlink_device_requests_total", "Read requests sent to the device.", "bus", "device")
	devLastDuration = metrics.NewGauge("fieldlink_device_last_poll_duration_seconds", "How long the device's latest poll took.", "bus", "device")
	devLastOK       = metrics.NewGauge("fieldlink_device_last_success_timestamp_seconds", "Unix time of the device's latest successful poll, 0 if none.", "bus", "device")
	devHealth       = metrics.NewGauge("fieldlink_device_health", "Health of the device: 1 for its current state (unknown, ok, degraded, offline), 0 for the others.", "bus", "device", "state")
	busBusy         = metrics.NewCounter("fieldlink_bus_busy_seconds_total", "Time the bus spent polling; its rate is the bus's utilisation, 0 to 1.", "bus")
	busOverruns     = metrics.NewCounter("fieldlink_bus_overruns_total", "Scheduled polls skipped because the bus ran late.", "bus")
	readingGauge    = metrics.NewGauge("fieldlink_reading", "The point's latest good reading, in its unit (a boolean as 1 or 0); a point that is stale, bad or not a number has no series.", "device", "point", "unit")

	deviceFamilies  = []*metrics.Desc{devPolls, devErrors, devRequests, devLastDuration, devLastOK, devHealth, busBusy, busOverruns}
	readingFamilies = []*metrics.Desc{readingGauge}
)

// BusSample is one bus's scheduler figures.
type BusSample struct {
	Name string
	// Busy is the total time the bus spent polling since it started: the
	// sum of the wire time of every poll. rate() of it is the bus's
	// utilisation.
	Busy time.Duration
	// Overruns counts scheduled polls skipped because the bus ran late,
	// over all its devices.
	Overruns uint64
}

// DeviceMetrics are the devices' and the buses' metrics. Device health is
// an enum in the style of node_exporter's systemd unit state:
// fieldlink_device_health{state="unknown|ok|degraded|offline"} has one
// series per state, 1 for the current one and 0 for the others. A nil
// function leaves its families out.
type DeviceMetrics struct {
	// Devices returns the status of every device: all buses' Status and
	// every serial sensor's Status.
	Devices func() []DeviceStatus
	// Buses returns the busy time and overruns of every bus.
	Buses func() []BusSample
}

// Families implements [metrics.Collector].
func (DeviceMetrics) Families() []*metrics.Desc { return deviceFamilies }

// Collect implements [metrics.Collector].
func (m DeviceMetrics) Collect(s *metrics.Scrape) {
	if m.Devices != nil {
		for _, d := range m.Devices() {
			s.Add(devPolls, float64(d.Polls), d.Bus, d.Name)
			s.Add(devErrors, float64(d.Errors), d.Bus, d.Name)
			s.Add(devRequests, float64(d.Requests), d.Bus, d.Name)
			s.Add(devLastDuration, d.LastDuration.Seconds(), d.Bus, d.Name)
			s.Add(devLastOK, metrics.UnixSeconds(d.LastOK), d.Bus, d.Name)
			for h := Unknown; h <= Offline; h++ {
				s.Add(devHealth, metrics.Bool(d.Health == h), d.Bus, d.Name, h.String())
			}
		}
	}
	if m.Buses != nil {
		for _, b := range m.Buses() {
			s.Add(busBusy, b.Busy.Seconds(), b.Name)
			s.Add(busOverruns, float64(b.Overruns), b.Name)
		}
	}
}

// ReadingMetrics are fieldlink_reading{device,point,unit}: each point's
// latest good reading (the site file's metrics.readings). A stale or bad
// point, a string or a NaN has no series: a 0 would read as a measurement
// on a graph, and an absent series is what Prometheus' own staleness
// handling expects.
type ReadingMetrics struct {
	// Readings returns the last reading of every point, as
	// [Poller.Readings] does; nil leaves the readings out.
	Readings func(now time.Time) []Reading
}

// Families implements [metrics.Collector].
func (ReadingMetrics) Families() []*metrics.Desc { return readingFamilies }

// Collect implements [metrics.Collector].
func (m ReadingMetrics) Collect(s *metrics.Scrape) {
	if m.Readings == nil {
		return
	}
	for _, p := range m.Readings(s.Now()) {
		if p.Quality != Good {
			continue
		}
		v, ok := p.Value.Float64()
		if !ok || math.IsNaN(v) {
			continue
		}
		s.Add(readingGauge, v, p.Device, p.Name, p.Unit)
	}
}

// DevicesAnswering reports whether at least one device answered its latest
// poll (health OK), and if none did, a reason that counts the devices in
// each state. It is the device part of a readiness check.
func DevicesAnswering(devs []DeviceStatus) (bool, string) {
	if len(devs) == 0 {
		return false, "no devices configured"
	}
	var n [Offline + 1]int
	for _, d := range devs {
		if d.Health <= Offline {
			n[d.Health]++
		}
	}
	if n[OK] > 0 {
		return true, ""
	}
	var parts []string
	for h := Unknown; h <= Offline; h++ {
		if n[h] > 0 {
			label := h.String()
			if h == Unknown {
				label = "not polled yet"
			}
			parts = append(parts, fmt.Sprintf("%d %s", n[h], label))
		}
	}
	return false, fmt.Sprintf("no device answering (%d devices: %s)", len(devs), strings.Join(parts, ", "))
}
