package testtool

import (
	"os"
	"testing"
)

func TestSiteFile(t *testing.T) {
	got := SiteFile{
		Site: `{id: "M1", id_field: MineId}`, Gateway: "gw-b", Metrics: "off", Buffer: "buf.db",
		Bus: "tcp://127.0.0.1:1", Timeout: "200ms",
		Devices: []string{"{name: ch4-1, profile: generic-mine-methane, slave: 1}"},
		Uplink:  []string{"probe: {interval: 200ms, timeout: 100ms}", `upstreams: [{url: "mqtt://127.0.0.1:1"}]`},
		Extra:   "packet: {values: number}\n",
	}.String()
	want := `site: {id: "M1", id_field: MineId}
gateway: {id: gw-b}
metrics: {listen: "off"}
buffer: {path: buf.db}
buses:
  - name: field
    url: tcp://127.0.0.1:1
    timeout: 200ms
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1}
uplink:
  probe: {interval: 200ms, timeout: 100ms}
  upstreams: [{url: "mqtt://127.0.0.1:1"}]
packet: {values: number}
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := (SiteFile{}).String(); got != "site: {id: \"001\"}\ngateway: {id: gw-test}\n" {
		t.Errorf("the empty site file: %q", got)
	}
	if got := (SiteFile{Metrics: "{listen: x, allow_remote: true}"}).String(); got != "site: {id: \"001\"}\ngateway: {id: gw-test}\nmetrics: {listen: x, allow_remote: true}\n" {
		t.Errorf("a metrics mapping: %q", got)
	}
	path := SiteFile{}.Write(t, "")
	if b, err := os.ReadFile(path); err != nil || string(b) != (SiteFile{}).String() {
		t.Errorf("Write: %q %v", b, err)
	}
}
