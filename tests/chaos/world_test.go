package chaos

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
)

// world is everything the gateway talks to, and the gateway itself.
type world struct {
	links [3]*brokertest.Proxy
	reg   *registryServer
	disk  *disk // nil when no tmpfs could be mounted
	gw    *gateway
	led   *ledger
	emu   *emulator.Emulator
}

// emulatorDevices are the site's devices: slave, profile, interval, and
// whether the device is the flaky one (alone on its own bus).
var emulatorDevices = []struct {
	name, profile string
	slave         byte
	interval      time.Duration
	flaky         bool
}{
	{"wind-1", "generic-wind-speed", 1, 100 * time.Millisecond, false},
	{"weather-1", "renke-rs-ws-n01", 2, 150 * time.Millisecond, false},
	{"rain-1", "generic-tipping-bucket-rain", 3, 200 * time.Millisecond, false},
	{"light-1", "dfrobot-sen0644", 4, 250 * time.Millisecond, false},
	{"soil-1", "sensecap-s-soil-mtec-02", 5, 250 * time.Millisecond, false},
	{"vane-1", "renke-rs-fxjt-n01", 6, 100 * time.Millisecond, true},
}

// flakyFaults is how the flaky device misbehaves.
var flakyFaults = emulator.Faults{Drop: 0.25, Exception: 0.1, Turnaround: 5 * time.Millisecond}

// startEmulator serves the devices on two Modbus TCP listeners, the steady
// bus's and the flaky device's, until the test ends.
func startEmulator(t *testing.T, seed int64) (emu *emulator.Emulator, steady, flaky string) {
	t.Helper()
	var names []string
	for _, d := range emulatorDevices {
		names = append(names, d.profile)
	}
	devs := emutest.Devices(t, names...) // slaves 1, 2, … in order
	for i, d := range emulatorDevices {
		if devs[i].Slave != d.slave {
			t.Fatalf("device %s: slave %d, want %d (the emulator numbers them in order)", d.name, d.slave, devs[i].Slave)
		}
		devs[i].Faults = emulator.Faults{Turnaround: 2 * time.Millisecond}
		if d.flaky {
			devs[i].Faults = flakyFaults
		}
	}
	emu, err := emulator.New(devs, emulator.Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return emu, testtool.ServeLoopback(t, emu.ServeTCP), testtool.ServeLoopback(t, emu.ServeTCP)
}

// subscribe connects a subscriber straight to broker addr (not through its
// proxy), subscribed to fieldlink/# at QoS 1, until the test ends. A lost
// connection is a problem of the run: it would lose receipts.
func subscribe(t *testing.T, addr string, i int, led *ledger) {
	t.Helper()
	brokertest.Subscribe(t, brokertest.Options{
		Name:      fmt.Sprintf("subscriber %c", 'A'+i),
		ID:        fmt.Sprintf("chaos-subscriber-%c", 'A'+i),
		Brokers:   []string{addr},
		Unordered: true,
		Quiesce:   100,
		Lost: func(err error) {
			led.problem("subscriber of broker %c lost its connection: %v", 'A'+i, err)
		},
	}, "fieldlink/#", func(topic string, payload []byte) {
		led.received(i, topic, payload, time.Now())
	})
}

// registryServer is the upstream registry: it lists upstreams, unless an
// outage makes it answer 503 or drop the connection.
type registryServer struct {
	url  string
	body []byte

	mu        sync.Mutex
	downs     map[string]int // outages in progress, by mode
	served    int
	refused   int
	requested int
}

func startRegistry(t *testing.T, upstreams ...string) *registryServer {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"upstreams":[`)
	for i, u := range upstreams {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"url":%q,"weight":1}`, u)
	}
	b.WriteString("]}")
	r := &registryServer{body: []byte(b.String()), downs: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.url = "http://" + ln.Addr().String() + "/upstreams"
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("registry: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return r
}

func (r *registryServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requested++
	drop, fail := r.downs["drop"] > 0, r.downs["503"] > 0
	if drop || fail {
		r.refused++
	} else {
		r.served++
	}
	r.mu.Unlock()
	switch {
	case drop:
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // a reset, not a clean close
				}
				_ = c.Close()
				return
			}
		}
		http.Error(w, "registry down", http.StatusServiceUnavailable)
	case fail:
		http.Error(w, "registry down", http.StatusServiceUnavailable)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(r.body)
	}
}

func (r *registryServer) setDown(mode string, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if down {
		r.downs[mode]++
	} else {
		r.downs[mode]--
	}
}

func (r *registryServer) stats() (requested, served, refused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requested, r.served, r.refused
}

// tmpfsSize is the size of the tmpfs that holds the buffer: small enough
// to fill in a moment, large enough for the backlog of the longest outage.
const tmpfsSize = "4m"

// disk is the small tmpfs holding the buffer.
type disk struct {
	dir string

	mu     sync.Mutex
	filler string // the filler file while the disk is full
}

// mountTmpfs mounts a tmpfs of tmpfsSize for the buffer, or returns nil
// and why it could not.
func mountTmpfs(t *testing.T) (*disk, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, "not root"
	}
	dir := filepath.Join(t.TempDir(), "buffer")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+tmpfsSize); err != nil {
		return nil, "mount tmpfs: " + err.Error()
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return &disk{dir: dir}, ""
}

// fill writes a filler file until the filesystem has no byte left; it
// returns why it did not, if it did not.
func (d *disk) fill() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.filler != "" {
		return "the disk is full already"
	}
	path := filepath.Join(d.dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		return "create filler: " + err.Error()
	}
	defer f.Close()
	d.filler = path
	chunk := make([]byte, 64<<10)
	for len(chunk) > 0 {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return "write filler: " + err.Error()
			}
			chunk = chunk[:len(chunk)/2] // top up the last pages
		}
	}
	return ""
}

func (d *disk) free() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.filler != "" {
		_ = os.Remove(d.filler)
		d.filler = ""
	}
}

// siteFile writes the gateway's site file into dir and returns its path.
func siteFile(t *testing.T, dir, steady, flaky, bufPath, brokerA, registryURL string, window int) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `# The chaos run's site (generated by the chaos test).
site: {id: "CHAOS", id_field: FarmId}
gateway: {id: %s}
metrics: {listen: "off"}
buses:
  - name: field
    url: tcp://%s
    timeout: 300ms
    backoff: 1s
    devices:
`, gatewayID, steady)
	for _, d := range emulatorDevices {
		if !d.flaky {
			fmt.Fprintf(&b, "      - {name: %s, profile: %s, slave: %d, interval: %v}\n", d.name, d.profile, d.slave, d.interval)
		}
	}
	fmt.Fprintf(&b, `  - name: flaky
    url: tcp://%s
    timeout: 200ms
    backoff: 1s
    devices:
`, flaky)
	for _, d := range emulatorDevices {
		if d.flaky {
			fmt.Fprintf(&b, "      - {name: %s, profile: %s, slave: %d, interval: %v}\n", d.name, d.profile, d.slave, d.interval)
		}
	}
	fmt.Fprintf(&b, `buffer: {path: %s, durability: always}
uplink:
  selector: p2c_ewma
  window: %d
  probe: {interval: 200ms, timeout: 150ms}
  upstreams:
    - {url: "mqtt://%s", qos: 1}
  registry: {url: %q, refresh: 1s}
`, bufPath, window, brokerA, registryURL)
	path := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startBrokers starts three mosquitto brokers, a subscriber on each and a
// proxy in front of each.
func startBrokers(t *testing.T, mosq string, led *ledger) [3]*brokertest.Proxy {
	t.Helper()
	var links [3]*brokertest.Proxy
	for i := range links {
		addr := testtool.StartMosquitto(t, mosq)
		subscribe(t, addr, i, led)
		links[i] = brokertest.NewProxy(t, string(rune('A'+i)), addr)
	}
	return links
}
