//go:build cluster

package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/internal/testtool/emutest"
)

// gatewayID is the test site's gateway id.
const gatewayID = "gw-cluster"

// device is one emulated Modbus device of a site.
type device struct {
	name, profile string
	slave         byte
	interval      time.Duration
}

// devices are the emulated site: about 23 packets a second.
var devices = []device{
	{"wind-1", "generic-wind-speed", 1, 100 * time.Millisecond},
	{"weather-1", "renke-rs-ws-n01", 2, 150 * time.Millisecond},
	{"rain-1", "generic-tipping-bucket-rain", 3, 200 * time.Millisecond},
}

// startEmulator serves the devices on a loopback Modbus TCP listener.
func startEmulator(t *testing.T) string { return startEmulatorOf(t, devices) }

// startEmulatorOf serves devices, slaves 1, 2, … in order, on a loopback
// Modbus TCP listener.
func startEmulatorOf(t *testing.T, devices []device) string {
	t.Helper()
	var names []string
	for i, d := range devices {
		if int(d.slave) != i+1 {
			t.Fatalf("device %s: slave %d, want %d (the emulator numbers them in order)", d.name, d.slave, i+1)
		}
		names = append(names, d.profile)
	}
	_, addr := emutest.Serve(t, false, names...)
	return addr
}

// link is the toxiproxy proxy between the gateway and one node's MQTT
// listener: a killed node's port refuses connections (the proxy is
// down), a black hole and a slow node are toxics on it.
type link struct{ *brokertest.Proxy }

func newLink(t *testing.T, name, upstream string) *link {
	t.Helper()
	return &link{brokertest.NewProxy(t, name, upstream)}
}

// blackHole makes the link swallow every byte both ways and hold its
// connections open: a node cut off, whose connections hang.
func (l *link) blackHole(on bool) {
	for _, dir := range []string{"upstream", "downstream"} {
		name := "blackhole-" + dir
		if on {
			l.AddToxic(fmt.Sprintf(`{"name":%q,"type":"timeout","stream":%q,"attributes":{"timeout":0}}`, name, dir))
		} else {
			l.RemoveToxic(name)
		}
	}
}

// slow delays everything the node sends the gateway (its CONNACKs and
// PUBACKs) by d.
func (l *link) slow(d time.Duration) {
	if d > 0 {
		l.AddToxic(fmt.Sprintf(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds()))
	} else {
		l.RemoveToxic("slow")
	}
}

// subscribe connects the platform's subscriber: a fixed client id, a
// persistent session (CleanSession false), fieldlink/# at QoS 1. It is
// connected straight to the nodes, not through the gateway's links, first
// to brokers[0] and, when that node goes away, to the next that answers;
// paho reconnects by itself and the session, kept by the cluster, brings
// what was published meanwhile.
func subscribe(t *testing.T, led *ledger, brokers ...string) {
	t.Helper()
	brokertest.Subscribe(t, brokertest.Options{
		ID:                   "fieldlink-cluster-platform",
		Brokers:              brokers,
		Persistent:           true,
		Reconnect:            true,
		MaxReconnectInterval: time.Second,
		ConnectTimeout:       3 * time.Second,
		KeepAlive:            5 * time.Second,
		Wait:                 20 * time.Second,
		Quiesce:              100,
		Connected:            led.subscriberConnected,
	}, "fieldlink/#", func(topic string, payload []byte) { led.received(topic, payload, time.Now()) })
}

// buildGateway builds cmd/gateway into a temporary directory.
func buildGateway(t *testing.T) string { return testtool.BuildGateway(t) }

// siteFile writes the site: the emulated bus, the buffer, the metrics
// listener on a port of its own choosing (the test reads each upstream's
// deliveries there, at the address the gateway logs) and the three
// nodes' links as upstreams, every other setting left to its default.
func siteFile(t *testing.T, dir, bus string, upstreams []string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `# The cluster tier's site (written by tests/cluster).
site: {id: "CLUSTER", id_field: FarmId}
gateway: {id: %s}
metrics: {listen: "127.0.0.1:0"}
buses:
  - name: field
    url: tcp://%s
    timeout: 300ms
    devices:
`, gatewayID, bus)
	for _, d := range devices {
		fmt.Fprintf(&b, "      - {name: %s, profile: %s, slave: %d, interval: %v}\n", d.name, d.profile, d.slave, d.interval)
	}
	fmt.Fprintf(&b, "buffer: {path: %s}\nuplink:\n  upstreams:\n", filepath.Join(dir, "buffer.db"))
	for _, u := range upstreams {
		fmt.Fprintf(&b, "    - {url: \"mqtt://%s\"}\n", u)
	}
	path := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// gateway is `gateway run -c site.yaml -print` as a process; every line it
// prints (a packet once stored) goes to the ledger.
type gateway struct {
	bin     string
	site    string
	cmd     *exec.Cmd
	log     testtool.SyncBuffer
	drained chan struct{}
	metrics string
}

func startGateway(t *testing.T, bin, site string, led *ledger) *gateway {
	t.Helper()
	g := &gateway{bin: bin, site: site, drained: make(chan struct{})}
	g.cmd = exec.Command(bin, "run", "-c", site, "-print", "-log-level", "info", "-log-format", "text")
	g.cmd.Stderr = &g.log
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	go func() {
		defer close(g.drained)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			led.stored(sc.Bytes(), time.Now())
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		g.stop()
		keepLog(t, "gateway.log", g.log.String())
		if t.Failed() {
			t.Logf("gateway log (tail):\n%s", tail(g.log.String(), 60))
		}
	})
	g.metrics = "http://" + testtool.MetricsAddr(t, g.log.String) + "/metrics"
	return g
}

// keepLog writes a process's log into $CLUSTER_LOG_DIR, when set.
func keepLog(t *testing.T, name, log string) {
	dir := os.Getenv("CLUSTER_LOG_DIR")
	if dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(log), 0o644); err != nil {
		t.Errorf("keep %s: %v", name, err)
	}
}

// stop ends the gateway with SIGTERM (SIGKILL after 15 s) and waits.
func (g *gateway) stop() {
	if g.cmd.ProcessState != nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.drained:
	case <-time.After(15 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.drained
	}
	_ = g.cmd.Wait()
}

// stopLeaving stops the gateway and hands the ledger what its buffer still
// holds (gateway buffer export): what it stored while it was waited for
// may still be on its way at the stop, and stays for the next start. It
// returns how many packets the buffer holds.
func (g *gateway) stopLeaving(t *testing.T, led *ledger) int {
	t.Helper()
	g.stop()
	var stderr bytes.Buffer
	cmd := exec.Command(g.bin, "buffer", "export", "-c", g.site)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gateway buffer export: %v\n%s", err, stderr.String())
	}
	n := 0
	for line := range bytes.Lines(out) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			led.leftInBuffer(line)
			n++
		}
	}
	return n
}

// delivered reads, from the gateway's metrics, the records each upstream
// acknowledged, by upstream name (mqtt://host:port).
func (g *gateway) delivered() (map[string]float64, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(g.metrics)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	const prefix = `fieldlink_upstream_delivered_records_total{upstream="`
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		name, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[name] = v
	}
	return out, sc.Err()
}
