package status

import (
	"strings"
	"testing"
	"time"

	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
)

// The cases of a field test of the page, a technician with a phone at a
// farm and a mine.

// A device's reason is short words from its failure's kind, with what to
// check (the log's hint), without the driver's text that names the device
// and its slave again.
func TestDeviceWhyInWords(t *testing.T) {
	f := newFake()
	timeout := modbus.Hint(modbus.ErrTimeout)
	f.devs = []sensors.DeviceStatus{
		{Name: "ch4-1", Bus: "a", Health: sensors.OK, Polls: 10, LastOK: t0.Add(-time.Second)},
		{Name: "co-1", Bus: "a", Health: sensors.Offline, Polls: 10, Errors: 4, ConsecutiveFailures: 4,
			LastError: "device co-1 (slave 2 on bus a): read holding 0+2: modbus: no reply before the deadline (timeout): slave 2, read holding registers (fc 3) addr 0 qty 2: nothing within 1s",
			Failure:   sensors.Failure{Kind: sensors.FailTimeout, Hint: timeout}},
		{Name: "o2-1", Bus: "a", Health: sensors.Degraded, Polls: 10, Errors: 1, ConsecutiveFailures: 1,
			LastError: "device o2-1 (slave 3 on bus a): read holding 900+1: modbus: slave 3, read holding registers (fc 3) addr 900 qty 1: modbus: exception '2' (illegal data address), function '131'",
			Failure:   sensors.Failure{Kind: sensors.FailException, Exception: 2}},
	}
	f.readings = nil
	html, _ := page(t, f, t0)
	s := server(f, &t0).Snapshot()
	want := map[string][]string{
		"co-1": {"no answer (timeout)", "4 failures in a row", timeout},
		"o2-1": {"last poll failed", "exception 2", "illegal data address", "no such register"},
	}
	for _, d := range s.Devices {
		why := str(d.Why)
		for _, w := range want[d.Name] {
			if !strings.Contains(why, w) {
				t.Errorf("%s: why %q lacks %q", d.Name, why, w)
			}
		}
		if strings.Contains(why, "(slave ") || strings.Contains(why, "slave 2") || strings.Contains(why, "slave 3") || strings.Contains(why, "device "+d.Name) || strings.Contains(why, "read holding") {
			t.Errorf("%s: why %q is the driver's text", d.Name, why)
		}
	}
	if strings.Contains(html, "read holding registers") {
		t.Error("the page shows the driver's text")
	}
}

// A line where every device times out: "nothing on this line answers" at
// the bus, with what to check, once; each device says the bus is down.
func TestBusNothingAnswers(t *testing.T) {
	f := newFake()
	timeout := modbus.Hint(modbus.ErrTimeout)
	f.devs = nil
	for i, name := range []string{"soil-1", "soil-2", "soil-3"} {
		f.devs = append(f.devs, sensors.DeviceStatus{Name: name, Bus: "a", Health: sensors.Offline, Polls: 10, Errors: 5, ConsecutiveFailures: 5,
			LastOK:    t0.Add(-time.Duration(90-i) * time.Second),
			LastError: "device " + name + ": read holding 0+2: modbus: no reply before the deadline (timeout)",
			Failure:   sensors.Failure{Kind: sensors.FailTimeout, Hint: timeout}})
	}
	f.readings = nil
	html, js := page(t, f, t0)
	s := server(f, &t0).Snapshot()
	b := s.Buses[0]
	if b.State != "down" || !strings.HasPrefix(str(b.Cause), "nothing on this line answers") || !strings.Contains(str(b.Cause), timeout) {
		t.Errorf("bus a, every device timing out: state %s, cause %q", b.State, str(b.Cause))
	}
	// Down since the last answer of any of its devices.
	if b.DownSince == nil || !b.DownSince.Equal(t0.Add(-88*time.Second)) {
		t.Errorf("bus a down since %v, want %v (its last answer)", b.DownSince, t0.Add(-88*time.Second))
	}
	if !strings.Contains(html, `down since <time datetime="2026-11-30T07:58:32Z">07:58:32 UTC</time> (1 min 28 s) because nothing on this line answers`) {
		bus := html[index(t, html, `data-bus="a"`):]
		t.Errorf("the page does not say since when, for how long and why the bus is down: %.300s", bus)
	}
	if n := strings.Count(html, "A and B swapped"); n != 1 {
		t.Errorf("the hint shows %d times, want once (at the bus)", n)
	}
	if !strings.Contains(js, `"down_since": "2026-11-30T07:58:32Z"`) {
		t.Error("the JSON lacks the bus's down_since")
	}
}

// A point past its alarm threshold is the first thing on the page, with
// its value, the threshold and since when; status.json says alarm: true
// and the threshold per point, and counts them.
func TestAlarmFirst(t *testing.T) {
	f := newFake()
	f.readings[0].Value = packet.Float(1.25, 2)
	f.readings[0].Alarm = &sensors.Crossed{Above: true, Limit: 1, Since: t0.Add(-74 * time.Second)}
	f.site.LastReload = &ReloadResult{At: t0.Add(-time.Minute), Err: "site.yaml:7:63: buses[0].devices[0].windw: unknown field"}
	html, js := page(t, f, t0)
	main := html[index(t, html, "<main id=main>")+len("<main id=main>"):]
	if !strings.HasPrefix(main, "<section class=alarm id=alarms>") {
		t.Errorf("the page does not begin with its alarms: %.200s", main)
	}
	sec := main[:strings.Index(main, "</section>")]
	for _, w := range []string{"ch4-1", "CH4", "1.25", "%VOL", "at or above 1", `<time datetime="2026-11-30T07:58:46Z">07:58:46 UTC</time>`, "1 min 14 s"} {
		if !strings.Contains(sec, w) {
			t.Errorf("the alarm section lacks %q: %s", w, sec)
		}
	}
	for _, w := range []string{`"alarm": true`, `"crossed": "above"`, `"limit": 1`, `"alarm_since": "2026-11-30T07:58:46Z"`, `"alarm": false`, `"alarm_threshold": null`, `"points_in_alarm": 1`} {
		if !strings.Contains(js, w) {
			t.Errorf("the JSON lacks %s", w)
		}
	}
	if !strings.Contains(html[index(t, html, `data-point="CH4"`):], `<td class="v alarm">`) {
		t.Error("the point's row is not marked in alarm")
	}
}

// An upstream down or failing says since when and for how long; a down
// one shows no share of the deliveries nor "no delivery failed"; the
// summary counts a failing one among those that do not deliver.
func TestUpstreamSince(t *testing.T) {
	f := newFake()
	f.delivered = map[string]uint64{"mqtt://two:1883": 50}
	f.ups[1] = selector.Stats{Name: "mqtt://two:1883"} // down, no delivery failed
	f.upErr["mqtt://two:1883"] = "connection refused: nothing listens at 10.0.0.5:1883"
	f.upDown = map[string]time.Time{"mqtt://two:1883": t0.Add(-74 * time.Second)}
	html, js := page(t, f, t0)
	row := html[index(t, html, `data-upstream="mqtt://two:1883"`):]
	row = row[:strings.Index(row, "</tr>")]
	if strings.Contains(row, "100") || strings.Contains(row, "no delivery failed") {
		t.Errorf("the down upstream's row: %s", row)
	}
	if !strings.Contains(row, `down since <time datetime="2026-11-30T07:58:46Z">07:58:46 UTC</time> (1 min 14 s)`) {
		t.Errorf("the down upstream's row does not say since when: %s", row)
	}
	if !strings.Contains(js, `"down_since": "2026-11-30T07:58:46Z"`) {
		t.Error("the JSON lacks the upstream's down_since")
	}

	// Failing: up, its deliveries refused.
	f.ups[0].ConsecutiveFailures, f.ups[0].Failures, f.ups[0].LastFailure = 5, 5, t0.Add(-time.Second)
	f.upFailing = map[string]time.Time{"mqtt://one:1883": t0.Add(-30 * time.Second)}
	s := server(f, &t0).Snapshot()
	if s.Summary.UpstreamsActive != 0 || s.Summary.UpstreamsDown != 2 || s.Summary.UpstreamsFailing != 1 {
		t.Errorf("one upstream down, one failing: summary %+v", s.Summary)
	}
	if up := s.Uplink.Upstreams[0]; up.State != "failing" || up.DownSince == nil || !up.DownSince.Equal(t0.Add(-30*time.Second)) {
		t.Errorf("the failing upstream: state %s, since %v", up.State, up.DownSince)
	}
	if html, _ := page(t, f, t0); !strings.Contains(html, "0 of 2 upstreams up (1 failing)") {
		t.Errorf("the summary line: %s", html[index(t, html, "points good"):][:120])
	}
}

// A refused reload lists its errors one per line; "1 poll"; the age stays
// at a phone's width; a command's id does not break; an expiry time is in
// the site's zone; a command whose text is unknown says nothing of it.
func TestPageSmallThings(t *testing.T) {
	f := newFake()
	f.site.Location = time.FixedZone("", 8*3600)
	f.site.LastReload = &ReloadResult{At: t0.Add(-time.Minute), Err: "site.yaml:7:63: buses[0].devices[0].windw: unknown field\nsite.yaml:9:3: buses[0].devices[1].slave: must be 1 to 247"}
	f.devs[0].Polls = 1
	f.buf.Normal, f.buf.Alarms = 0, 1
	f.downlink = &DownlinkStatus{Enabled: true, Commands: []DownlinkCommand{
		{At: t0, Device: "valve-1", Command: "Open = true (cmd-2026-0042)", Result: "expired: expired at 2026-11-30T07:59:00Z"},
		{At: t0, Device: "valve-1", Command: "", Result: "rejected: unreadable"},
	}}
	html, _ := page(t, f, t0)
	alerts := html[index(t, html, "id=alerts"):]
	alerts = alerts[:strings.Index(alerts, "</section>")]
	if !strings.Contains(alerts, "windw: unknown field<br>") && !strings.Contains(alerts, "windw: unknown field</li>") {
		t.Errorf("the refused reload's errors are not one per line: %s", alerts)
	}
	for _, w := range []string{"1 polls", "1 packets", "1 alarms"} {
		if strings.Contains(html, w) {
			t.Errorf("the page says %q", w)
		}
	}
	if strings.Contains(pageStyle, "th.age,td.age{display:none}") {
		t.Error("the age column is hidden at a phone's width")
	}
	if !strings.Contains(html, `<span class=id>(cmd-2026-0042)</span>`) {
		t.Errorf("the command's id may break: %s", html[index(t, html, "cmd-2026"):][:80])
	}
	if strings.Contains(html, "expired at 2026") || !strings.Contains(html, `expired at <time datetime="2026-11-30T07:59:00Z">15:59:00 UTC+8</time>`) {
		t.Errorf("the expiry is not in the site's time: %s", html[index(t, html, "expired at"):][:120])
	}
	if dl := html[index(t, html, "id=downlink"):]; strings.Contains(dl[:strings.Index(dl, "</section>")], "()") {
		t.Error("the downlink shows empty parentheses")
	}
}
