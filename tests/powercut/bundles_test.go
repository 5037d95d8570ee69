//go:build powercut

package powercut

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/fleet"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
)

// bundleSlave is the device that only bundles poll: bundle N adds it to
// the bus as device bN, so that the packets say which bundle runs.
const bundleSlave = 4

// bundleProbation is the bundles' probation, the least the site file
// allows.
const bundleProbation = 30 * time.Second

// bundleServer is the configuration server: it serves the bundle
// published last, and calls served (if set) once per bundle served whole.
type bundleServer struct {
	mu     sync.Mutex
	body   []byte
	serial uint64
	served func(serial uint64)
	count  int
}

func (b *bundleServer) publish(serial uint64, body []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.serial, b.body = serial, body
}

func (b *bundleServer) onServe(f func(serial uint64)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.served = f
}

func (b *bundleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	body, serial, f := b.body, b.serial, b.served
	b.served = nil
	b.count++
	b.mu.Unlock()
	etag := fmt.Sprintf(`"%d"`, serial)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", etag)
	_, _ = w.Write(body)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	if f != nil {
		f(serial)
	}
}

// stateReports are the remote configuration's reports (serial and
// state) the broker delivered.
type stateReports struct {
	mu   sync.Mutex
	seen map[string]bool // "serial state"
}

func (r *stateReports) has(serial int, state string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[fmt.Sprint(serial, " ", state)]
}

// subscribeReports collects the gateway's reports on its state topic.
func subscribeReports(t *testing.T, broker string, led *ledger) *stateReports {
	t.Helper()
	r := &stateReports{seen: map[string]bool{}}
	c := brokertest.NewClient(t, brokertest.Options{Name: "fleet", ID: "powercut-fleet", Brokers: []string{broker}, Wait: 10 * time.Second})
	c.Subscribe(t, "fieldlink/POWER/"+gatewayID+"/config/state", func(_ string, payload []byte) {
		var rep struct {
			Serial uint64 `json:"serial"`
			State  string `json:"state"`
		}
		if json.Unmarshal(payload, &rep) == nil {
			r.mu.Lock()
			r.seen[fmt.Sprint(rep.Serial, " ", rep.State)] = true
			r.mu.Unlock()
			led.poke()
		}
	})
	return r
}

// bundleStats are a bundles run's figures.
type bundleStats struct {
	published, applied, confirmed int
	onProbation                   int // cuts that found a bundle on probation in state.json
	ranAfter                      int // boots that polled a bundle on probation at the cut before
	missing                       int // state.json naming a bundle file that is not there
}

// bundleKinds are the moments a bundles run's cut aims at: 0–30 ms after
// the server handed the boot's new bundle over, while the gateway writes
// its file and state.json and reloads (apply); 0–500 ms after the bundle's
// own device was first polled, on probation (probation). After a cut that
// left a bundle on probation, a third of the cuts fall 0–50 ms into the
// next start, while the gateway reverts it (revert).
var bundleKinds = []string{"apply", "probation"}

// TestBundles cuts the power while remote-configuration bundles are
// applied, on probation and confirmed: the field gateway on a [LossyFS]
// with remote_config pulling from a server on the host, which publishes a
// new signed bundle before every boot; POWERCUT_BUNDLE_CUTS cuts (default
// 20) aimed at the apply and the probation, then
// POWERCUT_BUNDLE_CONFIRM_CUTS (default 1) when the gateway reports a
// bundle confirmed at the end of its 30 s probation. After every cut, state.json
// (as the cut left it) must name bundle files that exist, and the next
// boot must never poll a bundle that was on probation at the cut (it
// reverts); the packets are held to TestLossy's rules. A control run
// first cuts once on probation, rewrites state.json as if the probation
// had been forgotten, publishes nothing new, and must see the next boot
// run the bundle.
func TestBundles(t *testing.T) {
	mosq := testtool.FindMosquitto(t)
	bin := buildGateway(t)
	cuts := envInt(t, "POWERCUT_BUNDLE_CUTS", 20)
	confirms := envInt(t, "POWERCUT_BUNDLE_CONFIRM_CUTS", 1)
	t.Run("control", func(t *testing.T) {
		// state.json rewritten after each cut as if the probation had
		// been forgotten: the next boot must be seen running the bundle.
		began := time.Now()
		f, st := runBundles(t, bin, mosq, newLedger(), 1, 0, true)
		f.level = "lossy-bundles-control"
		t.Logf("%s; bundles published %d, on probation at a cut %d, polled after such a cut %d, %s",
			f, st.published, st.onProbation, st.ranAfter, time.Since(began).Round(time.Second))
		if st.ranAfter == 0 {
			t.Errorf("the control (state.json made to forget the probation at every cut) saw no boot run a bundle on probation at the cut: the test cannot see it")
		}
	})
	began := time.Now()
	led := newLedger()
	f, st := runBundles(t, bin, mosq, led, cuts, confirms, false)
	t.Logf("%s; bundles published %d, applied %d, confirmed %d, on probation at a cut %d, polled after such a cut %d, state.json naming a missing file %d, %s",
		f, st.published, st.applied, st.confirmed, st.onProbation, st.ranAfter, st.missing, time.Since(began).Round(time.Second))
	check(t, f, led, false)
	if st.ranAfter > 0 {
		t.Errorf("%d boots polled a bundle that was on probation at the cut before them", st.ranAfter)
	}
	if st.missing > 0 {
		t.Errorf("state.json named a missing bundle file %d times", st.missing)
	}
	if st.onProbation == 0 {
		t.Errorf("no cut found a bundle on probation: the run tested nothing")
	}
	if confirms > 0 && st.confirmed == 0 {
		t.Errorf("no bundle was confirmed")
	}
}

func runBundles(t *testing.T, bin, mosq string, led *ledger, cuts, confirms int, control bool) (figures, bundleStats) {
	rng, seed := seeded(t)
	dir := t.TempDir()
	lfs, mnt := mountLossyIn(t, dir)
	_, emuAddr := emutest.Serve(t, false, append(append([]string(nil), siteDevices[:3]...), "generic-wind-speed")...)
	broker := testtool.StartMosquitto(t, mosq)
	subscribe(t, broker, led)
	uplink := newLink(t, broker)

	srv := &bundleServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	keys := filepath.Join(dir, "fleet")
	if out, err := exec.Command(bin, "keygen", "-o", keys).CombinedOutput(); err != nil {
		t.Fatalf("gateway keygen: %v\n%s", err, out)
	}

	site := siteFile(t, dir, emuAddr, uplink.Addr(), filepath.Join(mnt, "buffer.db"), false)
	local, err := os.ReadFile(site)
	if err != nil {
		t.Fatal(err)
	}
	// The bundles are the local file with the bundle's device, without
	// remote_config (a local-only setting), signed by the fleet's key.
	bundleFile := filepath.Join(dir, "bundle.yaml")
	publish := func(serial int) {
		dev := fmt.Sprintf("      - {name: b%d, profile: generic-wind-speed, slave: %d, interval: 100ms}\n", serial, bundleSlave)
		s := strings.Replace(string(local), "buffer: ", dev+"buffer: ", 1)
		if err := os.WriteFile(bundleFile, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "config", "sign", "-key", keys+".key", "-serial", fmt.Sprint(serial), bundleFile).Output()
		if err != nil {
			t.Fatalf("gateway config sign: %v", err)
		}
		srv.publish(uint64(serial), out)
	}
	remote := fmt.Sprintf("remote_config: {url: \"http://%s/gw.json\", interval: 10s, keys: [%s.pub], probation: %v}\n", ln.Addr(), keys, bundleProbation)
	if err := os.WriteFile(site, append(local, remote...), 0o644); err != nil {
		t.Fatal(err)
	}
	reports := subscribeReports(t, broker, led)
	log := gatewayLog(t, dir)
	t.Logf("seed %d (POWERCUT_SEED=%d replays the cuts), %d cuts at bundles, %d at their confirmation", seed, seed, cuts, confirms)

	// polled is, per boot, the bundle devices it stored packets of.
	var mu sync.Mutex
	boot := 0
	polled := map[int]map[string]bool{}
	firstPoll := make(chan string, 64)
	led.seen = func(_ key, p *packet.Packet, fromBroker bool) {
		if fromBroker || !strings.HasPrefix(p.DeviceID, "b") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if polled[boot] == nil {
			polled[boot] = map[string]bool{}
		}
		if !polled[boot][p.DeviceID] {
			polled[boot][p.DeviceID] = true
			select {
			case firstPoll <- p.DeviceID:
			default:
			}
		}
	}
	var st bundleStats
	applied := map[string]bool{}
	stateDir := filepath.Join(mnt, "remote")
	// durable reads state.json as the cut left it, and checks that it
	// names files that exist.
	durable := func(i int) fleet.State {
		var s fleet.State
		b, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
		if os.IsNotExist(err) {
			return s
		}
		if err != nil {
			t.Fatalf("cut %d: state.json: %v", i, err)
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("cut %d: state.json does not read: %v\n%s", i, err, b)
		}
		for _, serial := range []uint64{s.Serial, s.KnownGood} {
			if serial == 0 {
				continue
			}
			if _, err := os.Stat(filepath.Join(stateDir, fmt.Sprintf("bundle-%d.yaml", serial))); err != nil {
				st.missing++
				t.Logf("cut %d: state.json names bundle %d, whose file is not there: %v\n%s", i, serial, err, b)
			}
		}
		return s
	}
	onProbation := 0           // the serial on probation at the last cut
	byKind := map[string]int{} // cut kind and the state the cut left
	salvages := 0
	var salvaged []string
	total := cuts + confirms
	for i := 1; i <= total+1; i++ {
		if !control || i == 1 {
			publish(i)
			st.published++
		}
		mu.Lock()
		boot = i
		mu.Unlock()
		for len(firstPoll) > 0 {
			<-firstPoll
		}
		kind := ""
		switch {
		case i > total:
		case i > cuts:
			kind = "confirm"
		case control:
			kind = "probation"
		default:
			kind = bundleKinds[rng.IntN(len(bundleKinds))]
			if onProbation != 0 && rng.IntN(3) == 0 {
				kind = "revert"
			}
		}
		cut := make(chan struct{})
		if kind == "apply" {
			delay := time.Duration(rng.IntN(300)) * 100 * time.Microsecond
			srv.onServe(func(uint64) {
				go func() { time.Sleep(delay); close(cut) }() // the cut's moment after the bundle left the server, not a synchronisation
			})
		}
		g := startProcess(t, bin, site, os.Environ(), led, log, i)
		if kind == "revert" {
			time.Sleep(time.Duration(rng.IntN(100)) * 500 * time.Microsecond) // the cut's moment in the start, not a synchronisation
		} else if !led.waitUntil(30*time.Second, func() bool { return g.gone.Load() || g.printed.Load() > 0 }) || g.gone.Load() {
			g.kill(t)
			t.Fatalf("boot %d: nothing stored within 30s; its stderr:\n%s", i, g.stderr.String())
		}
		wantDev := fmt.Sprintf("b%d", i)
		if control && i > 1 {
			wantDev = "b1" // the bundle on probation at the cut, made known good
		}
		waitPoll := func(limit time.Duration) bool {
			deadline := time.After(limit)
			for {
				select {
				case d := <-firstPoll:
					if d == wantDev {
						return true
					}
				case <-deadline:
					return false
				}
			}
		}
		switch kind {
		case "revert":
			g.kill(t)
		case "":
			// The last boot: no cut. Its bundle applied, every packet
			// delivered.
			if !waitPoll(30 * time.Second) {
				t.Errorf("the last boot never polled its bundle's device %s", wantDev)
			}
			led.waitUntil(time.Minute, func() bool { return g.gone.Load() || len(led.missingLocked()) == 0 })
			g.stop(t)
		case "apply":
			select {
			case <-cut:
			case <-time.After(30 * time.Second):
				g.kill(t)
				t.Fatalf("cut %d (apply): the gateway never pulled bundle %d within 30s; its stderr:\n%s", i, i, g.stderr.String())
			}
			g.kill(t)
		case "probation":
			if !waitPoll(30 * time.Second) {
				g.kill(t)
				t.Fatalf("cut %d (probation): bundle %d's device never polled within 30s; its stderr:\n%s", i, i, g.stderr.String())
			}
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // the cut's moment, not a synchronisation
			g.kill(t)
		case "confirm":
			// At the report of the confirmation, which follows the
			// new state.json and the pruning of older bundle files.
			if !led.waitUntil(bundleProbation+30*time.Second, func() bool { return g.gone.Load() || reports.has(i, fleet.StateApplied) }) || g.gone.Load() {
				g.kill(t)
				t.Fatalf("cut %d (confirm): bundle %d not confirmed within %v; its stderr:\n%s", i, i, bundleProbation+30*time.Second, g.stderr.String())
			}
			g.kill(t)
		}
		if s := g.stderr.String(); strings.Contains(s, salvageMark) {
			salvages++
			for _, l := range strings.Split(s, "\n") {
				if strings.Contains(l, salvageMark) || strings.Contains(l, salvageDone) {
					salvaged = append(salvaged, fmt.Sprintf("boot %d: %s", i, l))
				}
			}
		}
		mu.Lock()
		for d := range polled[i] {
			applied[d] = true
		}
		ran := onProbation != 0 && polled[i][fmt.Sprintf("b%d", onProbation)]
		mu.Unlock()
		if ran {
			st.ranAfter++
			t.Logf("boot %d polled b%d, the bundle on probation at the cut before it", i, onProbation)
		}
		if i <= total {
			if _, err := lfs.Cut(); err != nil {
				t.Fatalf("cut %d: %v", i, err)
			}
		}
		s := durable(i)
		onProbation = 0
		if s.Serial != s.KnownGood && i <= total {
			onProbation = int(s.Serial)
			st.onProbation++
			if control {
				s.KnownGood, s.Event, s.ProbationUntil = s.Serial, fleet.StateApplied, time.Time{}
				b, err := json.Marshal(s)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(stateDir, "state.json"), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Logf("boot %d (cut: %s): state.json serial %d, known good %d, %s", i, kind, s.Serial, s.KnownGood, s.Event)
		byKind[kind+" "+s.Event]++
		if kind == "confirm" && s.KnownGood == uint64(i) {
			st.confirmed++
		}
	}
	t.Logf("cuts by kind and the state they left: %v", byKind)
	st.applied = len(applied)
	return led.figures("lossy-bundles", total, salvages, salvaged), st
}
