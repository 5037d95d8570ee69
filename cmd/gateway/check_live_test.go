package main

import (
	"path/filepath"
	"strings"
	"testing"

	"fieldlink/internal/testtool"
)

// check passes a site file whose serial port and buffer directory do not
// exist: it cannot know. check -live looks, fails, and names each, with
// what to do.
func TestCheckLiveNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	port := filepath.Join(dir, "ttyUSB9")
	bufDir := filepath.Join(dir, "var", "fieldlink")
	site := testtool.SiteFile{
		Metrics: "off", Buffer: filepath.Join(bufDir, "buf.db"), Bus: "rtu://" + port + "?baud=9600",
		Devices: []string{"{name: ch4-1, profile: generic-mine-methane, slave: 1}"},
		Uplink:  []string{`upstreams: [{url: "mqtt://` + testtool.RefusedAddr(t) + `"}]`},
	}.Write(t, dir)
	if code, out, errOut := gw(t, "check", "-c", site); code != 0 || !strings.Contains(out, ": ok: ") {
		t.Fatalf("check: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := gw(t, "check", "-live", "-c", site)
	if code != 1 {
		t.Errorf("check -live: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"FAIL    " + port + " missing: is the adapter plugged in?",
		"buffer directory " + bufDir,
		bufDir + " missing: create it for the service",
		"device ch4-1 (slave 1 on bus field)",
		"not read: the bus's port failed",
		"nothing listens on 127.0.0.1:",
		"4 of 5 checks failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check -live does not say %q:\n%s%s", want, out, errOut)
		}
	}
}
