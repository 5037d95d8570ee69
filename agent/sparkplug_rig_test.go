package agent

import (
	"fmt"
	"strings"
	"testing"

	"fieldlink/config"
	"fieldlink/internal/testtool"
)

// startSparkplugGateway starts the gateway gwID of a Sparkplug B test: it
// polls one emulated irrigation valve at addr (every 200 ms with its two
// points writable and the downlink on when writable, else every 100 ms)
// and sends to each of urls as a Sparkplug B node whose settings are sp
// (such as "group_id: farm").
func startSparkplugGateway(t *testing.T, gwID, addr string, writable bool, sp string, urls ...string) (*config.Config, *Agent, *testtool.SyncBuffer) {
	t.Helper()
	device := "      - {name: valve-1, profile: generic-irrigation-valve, slave: 1, interval: 100ms}\n"
	downlink := ""
	if writable {
		device = `      - name: valve-1
        profile: generic-irrigation-valve
        slave: 1
        interval: 200ms
        writable:
          - {point: ValveOpen}
          - {point: Setpoint, min: 0, max: 50, step: 0.1}
`
		downlink = "downlink: {enabled: true, allow_unsigned: true}\n"
	}
	var ups strings.Builder
	for _, u := range urls {
		fmt.Fprintf(&ups, "    - {url: %q, encoding: sparkplug_b, sparkplug: {%s}}\n", u, sp)
	}
	return startSiteFile(t, t.TempDir(), `site: {id: "001"}
gateway: {id: `+gwID+`}
buffer: {path: buf.db}
metrics: {listen: "off"}
buses:
  - name: field
    url: tcp://`+addr+`
    timeout: 300ms
    devices:
`+device+`uplink:
  probe: {interval: 200ms, timeout: 100ms}
  upstreams:
`+ups.String()+downlink)
}
