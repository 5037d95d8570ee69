package status

import (
	"encoding/hex"
	"strings"
	"time"

	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
)

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
	// DownSince is when the bus went down: its serial port went down
	// (could not be opened, or went away; the bus retries it and polls
	// again once it opens), or, when no device answers, the last answer
	// of any (the start when none ever came); null while it is not down.
	DownSince *time.Time `json:"down_since"`
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
	// Kind is modbus, or serial for a serial sensor.
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
	// Alarm says the last reading is past one of the point's alarm
	// thresholds: its packets carry "Alarm":"True" and name it in
	// "AlarmFields". AlarmThreshold is the threshold crossed, AlarmSince
	// the first reading of the run in alarm; both null when not in alarm.
	// A point no longer good keeps its last reading's alarm, beside its
	// last_value.
	Alarm          bool       `json:"alarm"`
	AlarmThreshold *Threshold `json:"alarm_threshold"`
	AlarmSince     *time.Time `json:"alarm_since"`
}

// Threshold is an alarm threshold crossed: Crossed is above (the value
// is at or above Limit) or below (at or below it).
type Threshold struct {
	Crossed string  `json:"crossed"`
	Limit   float64 `json:"limit"`
}

// devices joins each device's status with the readings of its points.
func devices(devs []sensors.DeviceStatus, readings []sensors.Reading, now time.Time) []Device {
	health := map[string]sensors.Health{}
	for _, d := range devs {
		health[d.Name] = d.Health
	}
	byDev := map[string][]Point{}
	for _, p := range readings {
		// The readings are taken a moment after the devices' status: a poll
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

// why says in words why a device is not ok: what its last poll ran into
// and what to check, as the log's hint says it.
func why(d sensors.DeviceStatus) string {
	if d.Port.Down() {
		return "its port does not open, retried until it does: " + portCause(d.Port.Err)
	}
	switch d.Health {
	case sensors.Unknown:
		return "not polled yet"
	case sensors.Degraded, sensors.Offline:
	default:
		return ""
	}
	what, check := failureWords(d)
	tail := ""
	switch {
	case d.Failure.Kind == sensors.NoFailure || d.Failure.Kind == sensors.FailOther:
		// The driver's words: after the figures, as the last of them.
		if d.Health == sensors.Offline {
			what, tail = "no answer", "; last: "+what
		}
	case check != "":
		tail = "; " + check
	}
	if d.Health == sensors.Degraded {
		return "last poll failed: " + what + tail
	}
	return what + ": " + plural(d.ConsecutiveFailures, "failure") + " in a row, polled less often until it answers" + tail
}

// whyOnBus is why a device does not answer when its bus says why.
func whyOnBus(d Device) string {
	switch d.Health {
	case "unknown":
		return "not polled yet: the bus is down (above)"
	case "offline":
		return "no answer: " + plural(d.ConsecutiveFailures, "failure") + " in a row, polled less often until it answers; the bus is down (above)"
	}
	return "last poll failed: the bus is down (above)"
}

func point(p sensors.Reading, now time.Time) Point {
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
	if a := p.Alarm; a != nil {
		th := Threshold{Crossed: "below", Limit: a.Limit}
		if a.Above {
			th.Crossed = "above"
		}
		out.Alarm, out.AlarmThreshold, out.AlarmSince = true, &th, timePtr(a.Since)
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

func buses(samples []sensors.BusSample, mb map[string]modbus.Stats, devs []sensors.DeviceStatus, past *sample, now, started time.Time) []Bus {
	out := make([]Bus, 0, len(samples))
	for _, smp := range samples {
		b := Bus{Name: smp.Name, Overruns: smp.Overruns}
		if st, ok := mb[smp.Name]; ok {
			b.Requests, b.Responses = st.Requests, st.Responses
			b.Errors = BusErrors{Timeout: st.Timeouts, CRC: st.CRCErrors, Exception: st.Exceptions, Framing: st.FrameErrors, IO: st.IOErrors}
		}
		var n [sensors.Offline + 1]int
		var latest, lastAnswer time.Time
		portDown := false
		for _, d := range devs {
			if d.Bus != smp.Name || d.Health > sensors.Offline {
				continue
			}
			if d.Port.Down() && !portDown {
				portDown = true
				b.DownSince = timePtr(d.Port.Since)
			}
			b.Devices++
			n[d.Health]++
			if d.LastOK.After(lastAnswer) {
				lastAnswer = d.LastOK
			}
			if d.Health == sensors.OK && d.LastOK.After(latest) {
				latest = d.LastOK
				b.LastRoundTripSeconds, b.LastRoundTripDevice = ptr(seconds(d.LastDuration)), text(d.Name)
			}
		}
		failing := n[sensors.Degraded] + n[sensors.Offline]
		if portDown || (failing > 0 && n[sensors.OK] == 0) {
			b.Cause = text(busCause(smp.Name, devs))
		}
		switch {
		case portDown:
			b.State = "down"
		case n[sensors.Unknown] == b.Devices:
			b.State = "starting"
		case failing == 0:
			b.State = "ok"
		case n[sensors.OK] == 0:
			b.State = "down"
			if lastAnswer.IsZero() {
				lastAnswer = started
			}
			b.DownSince = timePtr(lastAnswer)
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
