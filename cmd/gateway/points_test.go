package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Check shows each point a site file changes, with the line that changes
// it, and the device's report by exception.
func TestCheckShowsPointOverrides(t *testing.T) {
	file := filepath.Join(t.TempDir(), "site.yaml")
	src := `site: {id: "001"}
gateway: {id: gw-01}
buses:
  - name: field-a
    url: rtu:///dev/ttyUSB0?baud=4800
    devices:
      - name: wind-1
        profile: generic-wind-speed
        slave: 1
        deadband_percent: 5
        points:
          - {point: WindSpeed, name: Wind, scale: 0.01, alarm: {above: 25}, deadband: 0.5}
`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := gw(t, "check", "-c", file)
	want := file + ":12: point WindSpeed: name Wind (profile WindSpeed), scale 0.01 (profile 0.1), alarm above 25 (profile none), deadband 0.5"
	rbe := "    report by exception: deadband 5%, heartbeat 10m0s\n"
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, rbe) {
		t.Fatalf("check: %d\n%s\n%s\nwant the lines %s and %s", code, out, errOut, want, rbe)
	}
}
