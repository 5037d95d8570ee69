package sensors_test

import (
	"context"
	"strings"
	"testing"

	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/profile"
)

// Identify ranks the profiles: sure for a device that names its vendor
// and model, a guess for one known only by registers that other profiles'
// maps also read, and nothing for a profile whose registers do not answer.
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
	for _, m := range id.Matches {
		if m.Confidence != sensors.Guess || !strings.Contains(m.Why, "as do those of") {
			t.Errorf("slave 2: %s is %s (%s); many profiles' maps read, so every one is a guess", m.Profile.Name, m.Confidence, m.Why)
		}
		if m.Registers != len(m.Profile.Registers) {
			t.Errorf("slave 2: %s listed with %d of %d registers", m.Profile.Name, m.Registers, len(m.Profile.Registers))
		}
	}
}
