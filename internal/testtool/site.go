package testtool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SiteFile is a site file of one bus, written for a test: the sections the
// tests set most, in the order an operator writes them. A field left empty
// leaves its key out (the gateway's default), but for Site and Gateway.
type SiteFile struct {
	Site    string   // the site mapping; "" is {id: "001"}
	Gateway string   // the gateway's id; "" is gw-test
	Metrics string   // metrics.listen, e.g. "off" or "127.0.0.1:0" (see MetricsAddr); or the whole section, a flow mapping "{listen: ...}"
	Buffer  string   // buffer.path
	Bus     string   // the bus's URL, e.g. "tcp://" + an emulator's address; "" is no bus
	Timeout string   // the bus's timeout, e.g. 200ms
	Devices []string // the bus's devices, each a flow mapping: {name: w, profile: p, slave: 1}
	Uplink  []string // the uplink section's lines, e.g. "probe: {interval: 200ms, timeout: 100ms}"
	Extra   string   // more top-level sections, as written
}

// String is the site file's YAML.
func (s SiteFile) String() string {
	var b strings.Builder
	line := func(l ...string) {
		b.WriteString(strings.Join(l, ""))
		b.WriteByte('\n')
	}
	line("site: ", or(s.Site, `{id: "001"}`))
	line("gateway: {id: ", or(s.Gateway, "gw-test"), "}")
	switch {
	case strings.HasPrefix(s.Metrics, "{"):
		line("metrics: ", s.Metrics)
	case s.Metrics != "":
		line(`metrics: {listen: "`, s.Metrics, `"}`)
	}
	if s.Buffer != "" {
		line("buffer: {path: ", s.Buffer, "}")
	}
	if s.Bus != "" {
		line("buses:")
		line("  - name: field")
		line("    url: ", s.Bus)
		if s.Timeout != "" {
			line("    timeout: ", s.Timeout)
		}
		line("    devices:")
		for _, d := range s.Devices {
			line("      - ", d)
		}
	}
	if len(s.Uplink) > 0 {
		line("uplink:")
		for _, l := range s.Uplink {
			line("  ", l)
		}
	}
	b.WriteString(s.Extra)
	return b.String()
}

// Write writes the site file as site.yaml in dir ("" is a temporary
// directory of the test) and returns its path.
func (s SiteFile) Write(t testing.TB, dir string) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(path, []byte(s.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
