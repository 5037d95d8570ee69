package main

import (
	"fieldlink/config"
	"path/filepath"
	"strings"
	"testing"
)

func TestInitWritesStartersThatCheck(t *testing.T) {
	for _, kind := range []string{"farm", "mine"} {
		file := filepath.Join(t.TempDir(), kind+".yaml")
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file); code != 0 {
			t.Fatalf("init %s: %s", kind, errOut)
		}
		code, out, errOut := gw(t, "check", "-c", file)
		if code != 0 || !strings.Contains(out, "ok:") || errOut != "" {
			t.Fatalf("check %s must pass without a warning: %d\n%s\n%s", kind, code, out, errOut)
		}
		c, err := config.Load(file, loadProfiles)
		if err != nil || c.Uplink == nil || c.Buffer.Path != config.DefaultBufferPath || c.Metrics.Listen == "off" {
			t.Fatalf("the %s starter must run as it is (an uplink, the buffer, the status page): %v %+v", kind, err, c)
		}
		// Not overwritten without asking; no terminal to ask on is a no.
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file); code == 0 || !strings.Contains(errOut, "not overwritten") {
			t.Fatalf("init must not overwrite: %s", errOut)
		}
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file, "-force"); code != 0 {
			t.Fatalf("init -force: %s", errOut)
		}
	}
	if code, _, errOut := gw(t, "init", "--kind", "factory"); code == 0 || !strings.Contains(errOut, "valid: farm, mine") {
		t.Fatalf("init bad kind: %s", errOut)
	}
	// Written to site.yaml unless told otherwise; "-o -" prints it.
	t.Chdir(t.TempDir())
	if code, _, errOut := gw(t, "init"); code != 0 || !strings.Contains(errOut, "wrote site.yaml") {
		t.Fatalf("init: %d %s", code, errOut)
	}
	if code, out, _ := gw(t, "init", "-o", "-"); code != 0 || !strings.HasPrefix(out, "# fieldlink site file for a farm") {
		t.Fatalf("init -o -: %d %s", code, out)
	}
}
