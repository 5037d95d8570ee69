package exception

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

func profiles(string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, "") }

// loadSite loads a site whose one device, gas-1, polls every 10s with the
// device lines given (deadband, points, ...).
func loadSite(t *testing.T, device string) (*config.Config, error) {
	t.Helper()
	src := `site: {id: "M1", id_field: MineId}
gateway: {id: gw-agent}
metrics: {listen: "off"}
buses:
  - name: b
    url: tcp://127.0.0.1:1502
    devices:
      - name: gas-1
        profile: generic-mine-multigas
        slave: 1
        interval: 10s
` + device
	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(file, profiles)
}

// reportByExceptionSite is the filter of loadSite's site, which must load.
func reportByExceptionSite(t *testing.T, device string) *Filter {
	t.Helper()
	c, err := loadSite(t, device)
	if err != nil {
		t.Fatal(err)
	}
	return New(c)
}

var t0 = time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)

// gas is a packet of gas-1 read at t0+at with CH4 and O2, alarmed when
// alarm names fields.
func gas(at time.Duration, ch4, o2 float64, alarm ...string) *packet.Packet {
	return &packet.Packet{DeviceID: "gas-1", At: t0.Add(at), AlarmFields: alarm, Fields: []packet.Field{
		{Name: "CH4", Value: packet.Float(ch4, 2)}, {Name: "O2", Value: packet.Float(o2, 1)},
	}}
}

// step is one polled packet and whether it must be stored.
type step struct {
	p    *packet.Packet
	keep bool
	why  string
}

func run(t *testing.T, x *Filter, steps []step) {
	t.Helper()
	for i, s := range steps {
		if got := x.Keep(s.p); got != s.keep {
			t.Errorf("step %d (%s): keep = %v, want %v", i, s.why, got, s.keep)
		}
	}
}

func TestReportByExceptionAbsoluteDeadband(t *testing.T) {
	x := reportByExceptionSite(t, "        deadband: 0.1\n")
	run(t, x, []step{
		{gas(0, 0.20, 20.9), true, "the first packet"},
		{gas(10*time.Second, 0.25, 20.9), false, "CH4 within 0.1"},
		{gas(20*time.Second, 0.30, 20.9), false, "CH4 0.1 from the last sent: not beyond"},
		{gas(30*time.Second, 0.31, 20.9), true, "CH4 beyond 0.1 from the last sent (0.20)"},
		{gas(40*time.Second, 0.31, 20.8), false, "O2 within 0.1"},
		{gas(50*time.Second, 0.31, 20.7), true, "O2 beyond 0.1 (drift adds up from the last sent)"},
	})
}

func TestReportByExceptionPercentDeadband(t *testing.T) {
	x := reportByExceptionSite(t, "        deadband_percent: 5\n")
	run(t, x, []step{
		{gas(0, 0.40, 20.0), true, "the first packet"},
		{gas(10*time.Second, 0.41, 20.9), false, "CH4 +2.5%, O2 +4.5%"},
		{gas(20*time.Second, 0.43, 20.0), true, "CH4 +7.5%"},
		{gas(30*time.Second, 0, 20.0), true, "CH4 to 0"},
		{gas(40*time.Second, 0.01, 20.0), true, "any change of a value last sent as 0"},
	})
}

func TestReportByExceptionPointRulesOverTheDevice(t *testing.T) {
	x := reportByExceptionSite(t, "        deadband: 5\n        points:\n          - {point: CH4, name: Methane, deadband: 0.05}\n")
	p := func(at time.Duration, ch4, o2 float64) *packet.Packet {
		q := gas(at, ch4, o2)
		q.Fields[0].Name = "Methane"
		return q
	}
	run(t, x, []step{
		{p(0, 0.20, 20.9), true, "the first packet"},
		{p(10*time.Second, 0.20, 17.0), false, "O2 within the device's 5"},
		{p(20*time.Second, 0.26, 17.0), true, "Methane beyond its own 0.05"},
	})
}

func TestReportByExceptionHeartbeat(t *testing.T) {
	x := reportByExceptionSite(t, "        deadband: 1\n        heartbeat: 1m\n        points: [{point: O2, heartbeat: 30s}]\n")
	run(t, x, []step{
		{gas(0, 0.2, 20.9), true, "the first packet"},
		{gas(10*time.Second, 0.2, 20.9), false, "unchanged"},
		{gas(20*time.Second, 0.2, 20.9), false, "unchanged"},
		{gas(30*time.Second, 0.2, 20.9), true, "O2's 30s heartbeat, the shortest, is due"},
		{gas(40*time.Second, 0.2, 20.9), false, "heartbeat counts from the last sent"},
	})
	// Without a heartbeat, a deadband gets the default one.
	x = reportByExceptionSite(t, "        deadband: 1\n")
	steps := []step{{gas(0, 0.2, 20.9), true, "the first packet"}}
	for at := 10 * time.Second; at < config.DefaultHeartbeat; at += 10 * time.Second {
		steps = append(steps, step{gas(at, 0.2, 20.9), false, "before the default heartbeat"})
	}
	run(t, x, append(steps, step{gas(config.DefaultHeartbeat, 0.2, 20.9), true, "the default heartbeat"}))
}

func TestReportByExceptionAlarmsAlwaysGo(t *testing.T) {
	x := reportByExceptionSite(t, "        deadband: 1\n")
	run(t, x, []step{
		{gas(0, 0.90, 20.9), true, "the first packet"},
		{gas(10*time.Second, 1.00, 20.9, "CH4"), true, "an alarm, within the deadband"},
		{gas(20*time.Second, 1.00, 20.9, "CH4"), true, "still an alarm, unchanged"},
		{gas(30*time.Second, 0.95, 20.9), true, "the alarm cleared"},
		{gas(40*time.Second, 0.95, 20.9), false, "unchanged, no alarm"},
	})
}

func TestReportByExceptionQualityChangeGoes(t *testing.T) {
	x := reportByExceptionSite(t, "        deadband: 1\n")
	run(t, x, []step{
		{gas(0, 0.2, 20.9), true, "the first packet"},
		{gas(10*time.Second, 0.2, 20.9), false, "unchanged"},
		{gas(40*time.Second, 0.2, 20.9), true, "the first after missed polls (the device was stale)"},
		{gas(50*time.Second, 0.2, 20.9), false, "unchanged"},
		{gas(45*time.Second, 0.2, 20.9), true, "the clock went back"},
	})
}

func TestReportByExceptionOtherDevicesAndKinds(t *testing.T) {
	x := reportByExceptionSite(t, "        deadband: 10\n")
	other := &packet.Packet{DeviceID: "wind-1", At: t0, Fields: []packet.Field{{Name: "WindSpeed", Value: packet.Float(1, 1)}}}
	for range 3 {
		if !x.Keep(other) {
			t.Fatal("a device without report by exception must store every packet")
		}
	}
	kind := func(at time.Duration, v packet.Value) *packet.Packet {
		return &packet.Packet{DeviceID: "gas-1", At: t0.Add(at), Fields: []packet.Field{{Name: "CH4", Value: v}}}
	}
	run(t, x, []step{
		{kind(0, packet.Bool(false)), true, "the first packet"},
		{kind(10*time.Second, packet.Bool(true)), true, "a bool that changed, whatever the deadband"},
		{kind(20*time.Second, packet.String("ok")), true, "another kind"},
		{kind(30*time.Second, packet.String("ok")), false, "the same string"},
		{kind(40*time.Second, packet.String("fault")), true, "a string that changed"},
	})
	var none *Filter
	if !none.Keep(other) {
		t.Error("no rules must store every packet")
	}
}

func TestReportByExceptionSiteFileErrors(t *testing.T) {
	for _, tc := range []struct{ device, want string }{
		{"        deadband: 1\n        deadband_percent: 5\n", "deadband_percent: give deadband or deadband_percent, not both"},
		{"        deadband: -1\n", "deadband: must be a finite number ≥ 0"},
		{"        deadband_percent: 0\n", "deadband_percent: must be above 0 and at most 100, got 0"},
		{"        heartbeat: 5s\n", "heartbeat: must be at least the device's interval (10s), got 5s"},
		{"        points: [{point: O2, deadband_percent: 200}]\n", "points[0].deadband_percent: must be above 0 and at most 100"},
		{"        deadbnd: 1\n", `(did you mean "deadband"?)`},
	} {
		_, err := loadSite(t, tc.device)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %s", tc.device, err, tc.want)
		}
	}
}
