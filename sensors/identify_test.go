package sensors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/profile"
)

// Identify ranks the profiles: sure for a device that names its vendor
// and model, likely for one known by the values its registers hold when no
// other profile fits as many, and nothing for a profile whose registers do
// not answer.
func TestIdentify(t *testing.T) {
	set, err := profile.Load(firmwareprofiles.FS, "")
	if err != nil {
		t.Fatal(err)
	}
	_, addr := emutest.Serve(t, false, "vaisala-gmp252", "generic-mine-multigas")
	c, err := modbus.Open("tcp://"+addr, modbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	id, err := sensors.Identify(ctx, c, 1, set)
	if err != nil {
		t.Fatal(err)
	}
	if id.ID.Vendor() != "Vaisala" || len(id.Matches) == 0 || id.Matches[0].Profile.Name != "vaisala-gmp252" || id.Matches[0].Confidence != sensors.Sure {
		t.Fatalf("slave 1: %q, %+v", id.ID, id.Matches)
	}
	for _, m := range id.Matches[1:] {
		if m.Confidence != sensors.Guess {
			t.Errorf("slave 1: %s is %s beside a sure match", m.Profile.Name, m.Confidence)
		}
	}

	id, err = sensors.Identify(ctx, c, 2, set)
	if err != nil {
		t.Fatal(err)
	}
	if id.ID != nil || len(id.Matches) < 2 {
		t.Fatalf("slave 2: %q, %d matches", id.ID, len(id.Matches))
	}
	if m := id.Matches[0]; m.Profile.Name != "generic-mine-multigas" || m.Confidence != sensors.Likely {
		t.Errorf("slave 2 is %s (%s: %s), want generic-mine-multigas, likely: no other profile fits its six values", m.Profile.Name, m.Confidence, m.Why)
	}
	for _, m := range id.Matches[1:] {
		if m.Confidence > sensors.Possible {
			t.Errorf("slave 2: %s is %s (%s) beside a likely match", m.Profile.Name, m.Confidence, m.Why)
		}
		if m.Registers != len(m.Profile.Registers) {
			t.Errorf("slave 2: %s listed with %d of %d registers", m.Profile.Name, m.Registers, len(m.Profile.Registers))
		}
	}
}

// A device that does not answer Read Device Identification, as many in
// the field do not, is matched by what its registers hold: the emulator
// serving profile X over TCP and over a serial line is named X, likely,
// and a weather sensor is never named a rain gauge (every match was a
// guess, and a weather sensor's first registers read as a rain gauge's).
func TestIdentifyMatchesWhatRegistersHold(t *testing.T) {
	set := embedded(t)
	for _, name := range []string{
		"renke-rs-ws-n01", "thies-wsc11", // weather
		"generic-tipping-bucket-rain", "xunchip-xm9505", // rain
		"generic-mine-multigas", "vaisala-gmp252", "elt-mb-350u-c", // gas
	} {
		p := *set[name]
		if name != "xunchip-xm9505" {
			// The emulator answers 43/14 with an exception, as many
			// devices in the field do. A rain gauge of one counter is
			// told from a tipping bucket whose other registers read zero
			// (no rain in the last hour) only by its identification.
			p.Manufacturer = ""
		}
		devs := []emulator.Device{{Slave: 1, Profile: &p}}
		for _, line := range []string{"tcp", "rtu"} {
			t.Run(name+"/"+line, func(t *testing.T) {
				emu, err := emulator.New(devs, emulator.Options{Seed: 1, Now: func() time.Time { return fixed }})
				if err != nil {
					t.Fatal(err)
				}
				url := "tcp://" + testtool.ServeLoopback(t, emu.ServeTCP)
				if line == "rtu" {
					url = "rtu://" + emutest.ServePty(t, emu, 19200, 'N') + "?baud=19200"
				}
				c := open(t, url, time.Second)
				id, err := sensors.Identify(context.Background(), c, 1, set)
				if err != nil {
					t.Fatal(err)
				}
				if len(id.Matches) == 0 {
					t.Fatalf("%s: no match", name)
				}
				// A generic tipping bucket's counter and zeros (no rain
				// in the last hour) fit any profile of one 16-bit value
				// at address 0 as well: it comes first, but possible.
				want := sensors.Likely
				if name == "generic-tipping-bucket-rain" {
					want = sensors.Possible
				}
				m := id.Matches[0]
				if m.Profile.Name != name || m.Confidence < want {
					t.Errorf("%s is named %s (%s: %s), want %s, %s or surer; all: %s", name, m.Profile.Name, m.Confidence, m.Why, name, want, matchList(id.Matches))
				}
				if set[name].DataType == "Weather" && m.Profile.DataType == "Rain" {
					t.Errorf("weather sensor %s named rain gauge %s", name, m.Profile.Name)
				}
			})
		}
	}
}

func matchList(ms []sensors.Match) string {
	var s []string
	for _, m := range ms {
		s = append(s, fmt.Sprintf("%s (%s)", m.Profile.Name, m.Confidence))
	}
	return strings.Join(s, ", ")
}
