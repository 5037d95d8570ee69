package fleet

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool"
	"fieldlink/sensors/profile"
)

func profiles(dir string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, dir) }

// fakeGateway records reloads and reports; its vitals are set by the test.
type fakeGateway struct {
	mu       sync.Mutex
	loaded   []*config.Config
	reports  []Report
	vitals   Vitals
	failLoad error
	// reported, if set, is sent each report, without waiting.
	reported chan Report
}

func (g *fakeGateway) Reload(c *config.Config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failLoad != nil {
		return g.failLoad
	}
	g.loaded = append(g.loaded, c)
	return nil
}

func (g *fakeGateway) Vitals() Vitals {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.vitals
}

func (g *fakeGateway) Report(r Report) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reports = append(g.reports, r)
	select {
	case g.reported <- r:
	default:
	}
}

func (g *fakeGateway) last() (Report, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.reports) == 0 {
		return Report{}, len(g.loaded)
	}
	return g.reports[len(g.reports)-1], len(g.loaded)
}

// server serves one bundle with an ETag, and counts the GETs and the
// conditional ones it answered 304.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	bundle []byte
	gets   int
	not    int
	// short, if above 0, cuts the next answer's body to so many bytes
	// under the whole bundle's ETag: a download cut short.
	short int
	// got, if set, is sent each request, without waiting.
	got chan struct{}
	// hang, if set, makes each request wait until its client gives up:
	// a configuration server that never answers.
	hang bool
}

func newServer(t *testing.T) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.gets++
		if s.got != nil {
			select {
			case s.got <- struct{}{}:
			default:
			}
		}
		if s.hang {
			s.mu.Unlock()
			<-r.Context().Done()
			return
		}
		defer s.mu.Unlock()
		if s.bundle == nil {
			http.NotFound(w, r)
			return
		}
		etag := fmt.Sprintf(`"%x"`, sha256.Sum256(s.bundle))
		if r.Header.Get("If-None-Match") == etag {
			s.not++
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		body := s.bundle
		if s.short > 0 {
			body, s.short = body[:s.short], 0
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) serve(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bundle = b
}

type rig struct {
	t     *testing.T
	dir   string
	local *config.Config
	priv  ed25519.PrivateKey
	srv   *server
	gw    *fakeGateway
	m     *Manager
	now   time.Time // the wall clock
	mono  time.Duration
	mu    sync.Mutex
	step  func(string)
}

const localSite = `site: {id: "001"}
gateway: {id: gw-01}
buffer: {path: buf.db}
metrics: {listen: "127.0.0.1:9273"}
buses:
  - name: b
    url: tcp://127.0.0.1:1502
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1}
remote_config: {url: %q, keys: [fleet.pub], probation: 1m}
`

func newRig(t *testing.T) *rig { return newRigIn(t, t.TempDir(), nil) }

// newRigIn makes a rig in dir; step, if set, is the manager's step hook.
func newRigIn(t *testing.T, dir string, step func(string)) *rig {
	t.Helper()
	r := &rig{t: t, dir: dir, srv: newServer(t), gw: &fakeGateway{vitals: Vitals{UpstreamUp: true, Answering: 1}}, now: b0, step: step}
	r.priv = testtool.SigningKeyFiles(t, filepath.Join(r.dir, "fleet"))
	var err error
	file := filepath.Join(r.dir, "site.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(localSite, r.srv.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.local, err = config.Load(file, profiles); err != nil {
		t.Fatal(err)
	}
	r.start()
	return r
}

// start makes the manager as gateway run does at start.
func (r *rig) start() {
	r.t.Helper()
	_, st, err := Startup(r.local, profiles)
	if err != nil {
		r.t.Fatal(err)
	}
	r.m, err = NewManager(r.local, st, r.gw, Options{Profiles: profiles, Now: r.clock, Elapsed: r.elapsed, Grace: 5 * time.Second, Step: r.step})
	if err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *rig) elapsed() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mono
}

// advance lets d pass, then watches the probation.
func (r *rig) advance(d time.Duration) {
	r.mu.Lock()
	r.now, r.mono = r.now.Add(d), r.mono+d
	r.mu.Unlock()
	r.m.watch()
}

// stepWall steps the wall clock alone by d, as NTP does, then watches the
// probation: no time passes.
func (r *rig) stepWall(d time.Duration) {
	r.mu.Lock()
	r.now = r.now.Add(d)
	r.mu.Unlock()
	r.m.watch()
}

func (r *rig) setVitals(h Vitals) {
	r.gw.mu.Lock()
	defer r.gw.mu.Unlock()
	r.gw.vitals = h
}

// bundle signs site (the local file with old replaced by new) as serial.
func (r *rig) bundle(serial uint64, old, new string, gateways ...string) []byte {
	r.t.Helper()
	site := strings.Replace(fmt.Sprintf(localSite, r.srv.URL), old, new, 1)
	b, err := Sign([]byte(site), Manifest{Serial: serial, Gateways: gateways, NotBefore: b0.Add(-time.Hour), Expires: b0.Add(24 * time.Hour)}, r.priv)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

func (r *rig) pull(b []byte) Report {
	r.t.Helper()
	r.srv.serve(b)
	r.m.fetch(context.Background())
	rep, _ := r.gw.last()
	return rep
}

// A good bundle is applied, watched on probation and confirmed: it is
// then what the gateway starts from.
func TestBundleAppliedAndConfirmed(t *testing.T) {
	r := newRig(t)
	rep := r.pull(r.bundle(1, "slave: 1}", "slave: 1, interval: 7s}"))
	if rep.State != StateProbation || rep.Serial != 1 || len(r.gw.loaded) != 1 || r.gw.loaded[0].Buses[0].Devices[0].Interval != 7*time.Second {
		t.Fatalf("report %+v, %d reloads", rep, len(r.gw.loaded))
	}
	if got := r.gw.loaded[0].Metrics.Listen; got != "127.0.0.1:9273" {
		t.Errorf("local-only metrics not kept: %q", got)
	}
	r.advance(30 * time.Second)
	if rep, _ := r.gw.last(); rep.State != StateProbation {
		t.Fatalf("before the probation's end: %+v", rep)
	}
	r.advance(31 * time.Second)
	if rep, _ := r.gw.last(); rep.State != StateApplied || rep.Serial != 1 {
		t.Fatalf("after the probation: %+v", rep)
	}
	// The same bundle again: nothing new. The confirmation cleared the
	// ETag, so it is downloaded once more, then a conditional GET answers
	// 304.
	before := len(r.gw.reports)
	r.m.fetch(context.Background())
	r.m.fetch(context.Background())
	if len(r.gw.reports) != before || r.srv.not != 1 {
		t.Errorf("the bundle in force fetched again: %d reports (was %d), %d not-modified", len(r.gw.reports), before, r.srv.not)
	}
	// A restart starts from the confirmed bundle, the server down.
	r.srv.Close()
	c, st, err := Startup(r.local, profiles)
	if err != nil || st.KnownGood != 1 || c.Buses[0].Devices[0].Interval != 7*time.Second {
		t.Fatalf("startup: known-good %d, interval %v, %v", st.KnownGood, c.Buses[0].Devices[0].Interval, err)
	}
}

// Refusals: each is reported, and the configuration in force is unchanged.
func TestBundleRefusals(t *testing.T) {
	r := newRig(t)
	r.pull(r.bundle(5, "", ""))
	r.advance(2 * time.Minute) // confirmed: serial 5 in force
	_, otherKey := keypair(t)
	byOther, _ := Sign([]byte(fmt.Sprintf(localSite, r.srv.URL)), Manifest{Serial: 9, NotBefore: b0.Add(-time.Hour), Expires: b0.Add(time.Hour)}, otherKey)
	expired, _ := Sign([]byte(fmt.Sprintf(localSite, r.srv.URL)), Manifest{Serial: 9, NotBefore: b0.Add(-2 * time.Hour), Expires: b0.Add(-time.Hour)}, r.priv)
	for _, tc := range []struct {
		name   string
		bundle []byte
		reason string
	}{
		{"bad signature", byOther, "bad signature"},
		{"lower serial", r.bundle(4, "", ""), "serial 4 is not above the serial in force, 5"},
		{"another gateway's", r.bundle(9, "", "", "gw-77"), "for other gateways"},
		{"expired", expired, "expired"},
		{"changes remote_config", r.bundle(9, "probation: 1m", "probation: 2m"), "remote_config is local to each gateway"},
		{"changes the metrics listener", r.bundle(9, "127.0.0.1:9273", "127.0.0.1:9999"), "metrics is local to each gateway"},
		{"allows unsigned commands", r.bundle(9, "probation: 1m}", "probation: 1m}\ndownlink: {allow_unsigned: true}"), "downlink.allow_unsigned is local to each gateway"},
		{"does not parse", r.bundle(9, "slave: 1}", "slave: 1, intervall: 5s}"), "intervall"},
	} {
		rep := r.pull(tc.bundle)
		if rep.State != StateRefused || !strings.Contains(rep.Reason, tc.reason) {
			t.Errorf("%s: report %+v, want refused saying %q", tc.name, rep, tc.reason)
		}
		if st := r.m.State(); st.Serial != 5 || len(r.gw.loaded) != 1 {
			t.Errorf("%s: serial in force %d, %d reloads: the configuration changed", tc.name, st.Serial, len(r.gw.loaded))
		}
	}
}

// A bundle that breaks the gateway is reverted within the probation and
// never applied again; one the reload refuses is refused.
func TestBundleReverted(t *testing.T) {
	r := newRig(t)
	r.pull(r.bundle(1, "slave: 1}", "slave: 1, interval: 7s}"))
	r.advance(2 * time.Minute) // known-good: 1
	rep := r.pull(r.bundle(2, "slave: 1}", "slave: 1, interval: 9s}"))
	if rep.State != StateProbation {
		t.Fatalf("%+v", rep)
	}
	r.gw.mu.Lock()
	r.gw.vitals = Vitals{UpstreamUp: false, Answering: 1} // every upstream lost
	r.gw.mu.Unlock()
	r.advance(2 * time.Second)
	if rep, _ := r.gw.last(); rep.State != StateProbation {
		t.Fatalf("reverted before the grace: %+v", rep)
	}
	r.advance(6 * time.Second)
	rep, n := r.gw.last()
	if rep.State != StateReverted || rep.Serial != 2 || !strings.Contains(rep.Reason, "no upstream reachable") {
		t.Fatalf("after the grace: %+v", rep)
	}
	if back := r.gw.loaded[n-1]; back.Buses[0].Devices[0].Interval != 7*time.Second {
		t.Errorf("reverted to interval %v, want the known-good 7s", back.Buses[0].Devices[0].Interval)
	}
	// Never again, even served again; a new serial is taken.
	r.gw.mu.Lock()
	r.gw.vitals = Vitals{UpstreamUp: true, Answering: 1}
	r.gw.mu.Unlock()
	if rep := r.pull(r.bundle(2, "slave: 1}", "slave: 1, interval: 9s} ")); rep.State != StateRefused || !strings.Contains(rep.Reason, "was reverted") {
		t.Errorf("a reverted serial served again: %+v", rep)
	}
	// Fewer devices answering also reverts.
	r.pull(r.bundle(3, "", ""))
	r.gw.mu.Lock()
	r.gw.vitals = Vitals{UpstreamUp: true, Answering: 0.8}
	r.gw.mu.Unlock()
	r.advance(3 * time.Second)
	r.advance(6 * time.Second)
	if rep, _ := r.gw.last(); rep.State != StateReverted || !strings.Contains(rep.Reason, "devices answering fell from 100% to 80%") {
		t.Errorf("fewer devices: %+v", rep)
	}
	// A bundle the gateway cannot run at all is refused at once.
	r.gw.mu.Lock()
	r.gw.failLoad = errors.New("buses cannot open")
	r.gw.mu.Unlock()
	if rep := r.pull(r.bundle(4, "", "")); rep.State != StateRefused || !strings.Contains(rep.Reason, "buses cannot open") {
		t.Errorf("reload refused: %+v", rep)
	}
	if st := r.m.State(); st.Serial != 1 {
		t.Errorf("serial in force %d, want the known-good 1", st.Serial)
	}
}

// A bundle on probation when the gateway stopped is reverted at the next
// start, which starts from the known-good bundle.
func TestRestartDuringProbationReverts(t *testing.T) {
	r := newRig(t)
	r.pull(r.bundle(1, "slave: 1}", "slave: 1, interval: 7s}"))
	r.advance(2 * time.Minute)
	r.pull(r.bundle(2, "slave: 1}", "slave: 1, interval: 9s}"))
	c, st, err := Startup(r.local, profiles)
	if err != nil || st.Event != StateReverted || st.Serial != 1 || c.Buses[0].Devices[0].Interval != 7*time.Second {
		t.Fatalf("startup: %+v interval %v %v", st, c.Buses[0].Devices[0].Interval, err)
	}
	r.start()
	_, loads := r.gw.last()
	if rep := r.pull(r.bundle(2, "slave: 1}", "slave: 1, interval: 9s}")); rep.State != StateRefused || !strings.Contains(rep.Reason, "was reverted") {
		t.Errorf("the bundle on probation at the restart, fetched again: %+v", rep)
	}
	if _, n := r.gw.last(); n != loads || r.m.State().Serial != 1 {
		t.Errorf("it was applied again: %d reloads (was %d), serial %d", n, loads, r.m.State().Serial)
	}
}

// steps are the named steps of applying, confirming and reverting.
// "#2" is the step's second time: the second bundle's.
var steps = []string{"write bundle", "record probation", "reload", "confirm",
	"write bundle#2", "record probation#2", "reload#2", "revert", "record revert"}

// A kill -9 at any step of applying, confirming or reverting a bundle
// leaves a gateway that starts on a valid configuration: the local file
// or the known-good bundle, never the one that was on probation.
func TestKillAtEachStep(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(exe, "-test.run=^TestKillChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "FLEET_KILL_DIR="+dir, "FLEET_KILL_AT="+step)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 137 {
				t.Fatalf("the child did not die at %q: %v\n%s", step, err, out)
			}
			local, err := config.Load(filepath.Join(dir, "site.yaml"), profiles)
			if err != nil {
				t.Fatal(err)
			}
			c, st, err := Startup(local, profiles)
			if err != nil {
				t.Fatalf("startup after a kill at %q: %v (state %+v)", step, err, st)
			}
			iv := c.Buses[0].Devices[0].Interval
			if iv == 9*time.Second {
				t.Errorf("after a kill at %q the gateway starts on the bundle that was on probation (state %+v)", step, st)
			}
			want := map[time.Duration]uint64{5 * time.Second: 0, 7 * time.Second: 1}
			if serial, ok := want[iv]; !ok || serial != st.KnownGood || st.Serial != st.KnownGood {
				t.Errorf("after a kill at %q: interval %v with state %+v: not the local file (5s) or the known-good bundle 1 (7s)", step, iv, st)
			}
		})
	}
}

// TestKillChild runs, in a child process, a bundle applied and confirmed
// then another applied and reverted, dying at FLEET_KILL_AT.
func TestKillChild(t *testing.T) {
	dir, at := os.Getenv("FLEET_KILL_DIR"), os.Getenv("FLEET_KILL_AT")
	if dir == "" {
		t.Skip("run by TestKillAtEachStep")
	}
	seen := map[string]int{}
	r := newRigIn(t, dir, func(name string) {
		seen[name]++
		if name == at || fmt.Sprintf("%s#%d", name, seen[name]) == at {
			os.Exit(137) // as a kill -9: nothing deferred runs
		}
	})
	r.pull(r.bundle(1, "slave: 1}", "slave: 1, interval: 7s}"))
	r.advance(2 * time.Minute)
	r.pull(r.bundle(2, "slave: 1}", "slave: 1, interval: 9s}"))
	r.gw.mu.Lock()
	r.gw.vitals = Vitals{}
	r.gw.mu.Unlock()
	r.advance(time.Second)
	r.advance(10 * time.Second)
	t.Fatalf("went through every step without dying at %q", at)
}
