package agent

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// With metrics.readings on, /metrics of a running gateway carries each
// good point under the name the site file gives it, and nothing for a
// device that never answered; with it off, no readings at all.
func TestReadingsInMetrics(t *testing.T) {
	addr := emulate(t, "generic-mine-methane")
	for _, on := range []bool{true, false} {
		dir := t.TempDir()
		src := fmt.Sprintf(`site: {id: "M1", id_field: MineId}
gateway: {id: gw-agent}
metrics: {listen: "off", readings: %v}
buses:
  - name: b
    url: tcp://%s
    timeout: 200ms
    devices:
      - name: ch4-1
        profile: generic-mine-methane
        slave: 1
        interval: 1s
        points: [{point: CH4, name: Methane}]
      - {name: ch4-9, profile: generic-mine-methane, slave: 9, interval: 1s}
`, on, addr)
		c := loadSiteFile(t, dir, src)
		got := make(chan *packet.Packet, 1)
		g, err := Start(c, Options{OnPacket: func(p *packet.Packet) {
			testtool.ValidPacket(t, p.AppendJSON(nil, c.Packet.Values))
			if p.DeviceID == "ch4-1" {
				select {
				case got <- p:
				default:
				}
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		p := <-got
		if p.Fields[0].Name != "Methane" {
			t.Errorf("the packet's field is %q, want the site file's name Methane", p.Fields[0].Name)
		}
		srv := httptest.NewServer(MetricsHandler(c, g.Sources(), slog.New(slog.DiscardHandler)))
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		g.Stop()
		text := string(body)
		series := `fieldlink_reading{device="ch4-1",point="Methane",unit="%VOL"} `
		if on != strings.Contains(text, series) {
			t.Errorf("readings %v: series %s present = %v:\n%s", on, series, !on, text)
		}
		if strings.Contains(text, `device="ch4-9",point=`) {
			t.Errorf("readings %v: a device that never answered has a reading:\n%s", on, text)
		}
		if !on && strings.Contains(text, "fieldlink_reading") {
			t.Errorf("readings off, yet /metrics has fieldlink_reading")
		}
	}
}
