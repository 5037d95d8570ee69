package sensors_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/profile"
)

// A failed poll carries its kind, taken from the error where it arises:
// a silent slave times out, a register the device lacks is exception 2;
// the hint is the log's, and the detail does not name the device again.
// A point past its alarm threshold says so, with the threshold and the
// first reading of the run.
func TestFailureKindsAndAlarms(t *testing.T) {
	set := embedded(t)
	gas := set["generic-mine-methane"]
	above := 0.0
	alarmed, err := gas.WithOverrides([]profile.Override{{Point: "CH4", Alarm: &profile.Alarm{Above: &above}}})
	if err != nil {
		t.Fatal(err)
	}
	// A profile whose register is past the emulated device's map.
	wrong := *gas
	wrong.Registers = append([]profile.Register(nil), gas.Registers[:1]...)
	wrong.Registers[0].Address = 900
	emu, err := emulator.New([]emulator.Device{{Slave: 1, Profile: gas}, {Slave: 3, Profile: gas}}, emulator.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	client := open(t, "rtuovertcp://"+testtool.ServeLoopback(t, emu.ServeRTUOverTCP), 100*time.Millisecond)
	specs := []sensors.DeviceSpec{
		{Name: "gas", Slave: 1, Profile: alarmed, Interval: time.Hour},
		{Name: "ghost", Slave: 7, Profile: gas, Interval: time.Hour},
		{Name: "wrong-map", Slave: 3, Profile: &wrong, Interval: time.Hour},
	}
	bus, err := sensors.NewBus("b", client, specs, sensors.BusOptions{MaxGap: -1, Hint: modbus.Hint})
	if err != nil {
		t.Fatal(err)
	}
	var first time.Time
	for range 2 {
		bus.PollAll(context.Background(), func(p *packet.Packet, err error) {
			if p != nil && p.DeviceID == "gas" && first.IsZero() {
				first = p.At
			}
		})
	}
	st := bus.Status()
	want := []struct {
		kind sensors.FailureKind
		code byte
		hint string
	}{{sensors.NoFailure, 0, ""}, {sensors.FailTimeout, 0, modbus.Hint(modbus.ErrTimeout)}, {sensors.FailException, 2, ""}}
	for i, w := range want {
		f := st[i].Failure
		if f.Kind != w.kind || f.Exception != w.code || f.Hint != w.hint {
			t.Errorf("%s: failure %+v, want kind %s, exception %d, hint %q", st[i].Name, f, w.kind, w.code, w.hint)
		}
		if w.kind != sensors.NoFailure && (f.Detail == "" || strings.Contains(f.Detail, st[i].Name)) {
			t.Errorf("%s: detail %q names the device, or is empty", st[i].Name, f.Detail)
		}
	}
	var ch4 *sensors.Reading
	for _, p := range bus.Readings(time.Now()) {
		if p.Device == "gas" && p.Name == "CH4" {
			ch4 = &p
		}
	}
	if ch4 == nil || ch4.Alarm == nil || !ch4.Alarm.Above || ch4.Alarm.Limit != 0 || !ch4.Alarm.Since.Equal(first) {
		t.Fatalf("CH4 past its threshold of 0: %+v (first reading at %v)", ch4, first)
	}
}
