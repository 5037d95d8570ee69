package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"fieldlink/agent"
	"fieldlink/config"
	"fieldlink/internal/testtool"
)

// A SIGHUP whose site file has errors is refused before the agent sees
// the file: the status page must still know, with the first errors, as
// the refused reload above everything else.
func TestReloadRefusedFileOnStatus(t *testing.T) {
	_, addr := serve(t, false, "generic-wind-speed")
	file := writeSite(t, fmt.Sprintf(`site: {id: "R2"}
gateway: {id: gw-refuse}
buses:
  - name: field
    url: tcp://%s
    devices:
      - {name: wind-1, profile: generic-wind-speed, slave: 1, interval: 100ms}
`, addr))
	c, err := config.Load(file, loadProfiles)
	if err != nil {
		t.Fatal(err)
	}
	g, err := agent.Start(c, agent.Options{Logger: testtool.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	bad := strings.Replace(strings.Replace(mustRead(t, file), "slave: 1", "slave: 1, windw: 3", 1), "interval: 100ms", "interval: often", 1)
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	reload(g, file, testtool.Logger(t))
	r := g.Sources().Identity().LastReload
	if r == nil {
		t.Fatal("a refused reload is recorded nowhere: last_reload is nil")
	}
	if r.At.IsZero() || !strings.Contains(r.Err, "windw") || !strings.Contains(r.Err, "often") || !strings.Contains(r.Err, "site.yaml:") {
		t.Errorf("refused reload %+v: want its time and its first errors with file and line", r)
	}
}
