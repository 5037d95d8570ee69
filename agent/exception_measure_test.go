package agent

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/packet"
)

// farmDevices are the demo farm's devices (demo/demo-farm.yaml) with the
// report-by-exception settings docs/points.md measures.
const farmDevices = `
      - {name: weather-1,    profile: renke-rs-ws-n01,             slave: 1, interval: 1s%s}
      - {name: anemometer-1, profile: generic-wind-speed,          slave: 2, interval: 500ms%s}
      - {name: wind-vane-1,  profile: renke-rs-fxjt-n01,           slave: 3, interval: 500ms%s}
      - {name: rain-1,       profile: generic-tipping-bucket-rain, slave: 4, interval: 2s%s}
      - {name: soil-1,       profile: sensecap-s-soil-mtec-02,     slave: 5, interval: 2s%s}
      - {name: light-1,      profile: dfrobot-sen0644,             slave: 6, interval: 1s%s}
      - {name: valve-1,      profile: generic-irrigation-valve,    slave: 7, interval: 1s%s}
`

var farmReportByException = []any{
	", heartbeat: 5m, points: [{point: Temperature, deadband: 0.2}, {point: Humidity, deadband: 1}]",
	", heartbeat: 5m, deadband: 0.5",
	", heartbeat: 5m, points: [{point: WindDirection, deadband: 10}]",
	", heartbeat: 5m",
	", heartbeat: 5m, points: [{point: SoilTemperature, deadband: 0.2}, {point: SoilMoisture, deadband: 0.5}, {point: SoilConductivity, deadband_percent: 5}]",
	", heartbeat: 5m, deadband_percent: 10",
	", heartbeat: 5m",
}

// TestMeasureReportByExceptionOnTheDemoFarm runs the demo farm's devices on the
// emulator for FIELDLINK_MEASURE_RBE (a duration) without and then with
// report by exception, and prints the packets polled and stored and the
// bytes the process wrote to the disk (/proc/self/io write_bytes). It is
// a measurement for docs/points.md, not a check: opt-in.
func TestMeasureReportByExceptionOnTheDemoFarm(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("FIELDLINK_MEASURE_RBE"))
	if err != nil {
		t.Skip("set FIELDLINK_MEASURE_RBE=2m to measure report by exception on the demo farm")
	}
	addr := emulate(t, "renke-rs-ws-n01", "generic-wind-speed", "renke-rs-fxjt-n01", "generic-tipping-bucket-rain",
		"sensecap-s-soil-mtec-02", "dfrobot-sen0644", "generic-irrigation-valve")
	for _, rbe := range []bool{false, true} {
		args := make([]any, len(farmReportByException))
		for i := range args {
			args[i] = ""
			if rbe {
				args[i] = farmReportByException[i]
			}
		}
		up := newIngest(t, 204)
		dir := t.TempDir()
		src := fmt.Sprintf(`site: {id: "001", timezone: Asia/Shanghai}
gateway: {id: gw-farm-demo}
metrics: {listen: "off"}
buffer: {path: farm.db, durability: interval, sync_every: 200ms}
uplink: {upstreams: [{url: %q}]}
buses:
  - name: farm-field
    url: tcp://%s
    timeout: 300ms
    devices:`+fmt.Sprintf(farmDevices, args...), up.URL+"/ingest", addr)
		c := loadSiteFile(t, dir, src)
		var mu sync.Mutex
		var polled, stored, jsonBytes int
		byDevice := map[string]int{}
		before := writeBytes(t)
		g, err := Start(c, Options{
			OnPolled: func(*packet.Packet) { mu.Lock(); polled++; mu.Unlock() },
			OnPacket: func(p *packet.Packet) {
				mu.Lock()
				stored++
				byDevice[p.DeviceID]++
				jsonBytes += len(p.AppendJSON(nil, c.Packet.Values))
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(d) // the measurement's length, not a synchronisation
		g.StopPolling()
		st, _ := g.Buffer().Stats()
		if err := g.Stop(); err != nil {
			t.Fatal(err)
		}
		written := writeBytes(t) - before
		mu.Lock()
		t.Logf("report by exception %v, %v: polled %d, stored %d (%.1f%%), packet JSON %d bytes, buffer commits %d, fsyncs %d, written to disk %d bytes; stored by device %v",
			rbe, d, polled, stored, 100*float64(stored)/float64(polled), jsonBytes, st.Commits, st.Fsyncs, written, byDevice)
		mu.Unlock()
	}
}

// writeBytes is the bytes this process caused to be written to storage.
func writeBytes(t *testing.T) int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Skip("no write_bytes in /proc/self/io")
	return 0
}
