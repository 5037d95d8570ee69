package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Check shows each point a site file changes, with the line that changes it.
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
        points:
          - {point: WindSpeed, name: Wind, scale: 0.01, alarm: {above: 25}}
`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := gw(t, "check", "-c", file)
	want := file + ":11: point WindSpeed: name Wind (profile WindSpeed), scale 0.01 (profile 0.1), alarm above 25 (profile none)"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("check: %d\n%s\n%s\nwant the line %s", code, out, errOut, want)
	}
}
