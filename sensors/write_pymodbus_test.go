package sensors_test

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/sensors"
	"fieldlink/sensors/plan"
)

// Values in engineering units reach pymodbus byte for byte as the profile
// says the device wants them, over Modbus TCP and over RTU on a pty: an
// int32 in CDAB, a float32, a 0.1 scale (5.1 is raw 51), and a coil false
// as function 5 with 0000. Neighbouring registers are untouched.
func TestWritesReachPymodbus(t *testing.T) {
	for _, mode := range []string{"tcp", "rtu"} {
		t.Run(mode, func(t *testing.T) {
			var url string
			switch mode {
			case "tcp":
				_, addr := testtool.StartPymodbusTCP(t, "modbus/testdata/pymodbus_server.py")
				url = "tcp://" + addr
			case "rtu":
				ours, theirs := testtool.PtyPair(t)
				testtool.StartPymodbus(t, "modbus/testdata/pymodbus_server.py", "--rtu", theirs, "--baud", "19200")
				url = "rtu://" + ours + "?baud=19200"
			}
			c := open(t, url, 500*time.Millisecond)
			prof := embedded(t)["generic-irrigation-valve"]
			spec := sensors.DeviceSpec{Name: "valve-1", Slave: 1, Profile: prof, Interval: time.Second, DataType: prof.DataType}
			bus, err := sensors.NewBus("field", c, []sensors.DeviceSpec{spec}, sensors.BusOptions{Cost: plan.Serial(19200, 11, 5*time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct {
				point string
				v     float64
				back  string
			}{
				{"ValveOpen", 0, "False"}, // coil 0 starts on in the script's map
				{"Setpoint", 5.1, "5.1"},
				{"FlowTotal", -123456, "-123456"},
				{"PressureLimit", 42.5, "42.50"},
			} {
				res, err := bus.Write(context.Background(), "valve-1", w.point, w.v)
				if err != nil || res.Err != nil || res.ReadErr != nil {
					t.Fatalf("%s = %v: %v %+v", w.point, w.v, err, res)
				}
				if res.Readback.String() != w.back {
					t.Errorf("%s = %v: read back %s, want %s", w.point, w.v, res.Readback, w.back)
				}
			}
			regs, err := c.Read(context.Background(), 1, 3, 0, 8)
			if err != nil {
				t.Fatal(err)
			}
			// holding 0 and 6..7 as the script made them (1000 + i);
			// 1: 51; 2..3: -123456 = 0xFFFE1DC0 low word first; 4..5:
			// 42.5 as float32 ABCD.
			if got, want := hex.EncodeToString(regs), "03e8"+"0033"+"1dc0fffe"+"422a0000"+"03ee03ef"; got != want {
				t.Errorf("holding 0..7 on the device:\n got %s\nwant %s", got, want)
			}
			coils, err := c.Read(context.Background(), 1, 1, 0, 4)
			if err != nil {
				t.Fatal(err)
			}
			if coils[0]&1 != 0 || coils[0]&8 == 0 {
				t.Errorf("coils 0..3 = %08b: want coil 0 off (written false) and coil 3 still on", coils[0])
			}
			if st := c.Stats(); st.Writes != 4 {
				t.Errorf("%d writes on the wire, want 4: %+v", st.Writes, st)
			}
		})
	}
}
