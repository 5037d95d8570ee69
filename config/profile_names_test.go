package config

import (
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/sensors/profile"
	"strings"
	"testing"
)

// An unknown profile names the three nearest, not every profile shipped:
// the status page shows a refused reload's errors, on a phone.
func TestUnknownProfileNamesNearestThree(t *testing.T) {
	src := `site: {id: "001"}
gateway: {id: gw-01}
buses:
  - name: a
    url: tcp://127.0.0.1:1502
    devices:
      - {name: gas-1, profile: generic-mine-methan, slave: 1}
`
	_, err := Parse("site.yaml", []byte(src), func(dir string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, dir) })
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	want := `unknown profile "generic-mine-methan" (did you mean "generic-mine-methane"?) (nearest: generic-mine-methane, `
	if !strings.Contains(msg, want) || strings.Count(msg, ", ") > 2 || !strings.HasSuffix(msg, "; gateway profiles lists them all)") {
		t.Errorf("error\n  %s\nwant it to contain\n  %s\nand at most three names", msg, want)
	}
}
