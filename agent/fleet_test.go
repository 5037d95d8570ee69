package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
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
	"fieldlink/fleet"
	"fieldlink/internal/signing"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/packet"
)

// A bundle with wrong broker credentials, against a real mosquitto that
// checks them: applied, every upstream lost, reverted within its
// probation, reported (retained) on the broker, and no packet lost across
// the episode.
func TestBundleWithWrongCredentialsIsReverted(t *testing.T) {
	passwd := testtool.RequireSbin(t, "mosquitto_passwd", "mosquitto")
	dir := t.TempDir()
	pwfile := filepath.Join(dir, "mosquitto.passwd")
	if out, err := exec.Command(passwd, "-b", "-c", pwfile, "gw", "right-Pa55").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
	}
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t), "allow_anonymous false", "password_file "+pwfile)
	// A bundle names files only in the fleet's secrets directory.
	if err := os.MkdirAll(filepath.Join(dir, "remote", "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, pw := range map[string]string{"right.pass": "right-Pa55\n", "remote/secrets/wrong.pass": "wrong-Pa55\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	priv := testtool.SigningKeyFiles(t, filepath.Join(dir, "fleet"))
	var mu sync.Mutex
	var served []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if served == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("ETag", fmt.Sprintf(`"%x"`, sha256.Sum256(served)))
		_, _ = w.Write(served)
	}))
	defer srv.Close()

	site := mineSite("gw-fleet", emulate(t, "generic-mine-methane"), fmt.Sprintf(`uplink:
  probe: {interval: 200ms, timeout: 100ms}
  upstreams:
    - {url: %q, username: gw, password_file: right.pass}
remote_config: {url: %q, keys: [fleet.pub], probation: 1m}
`, b.URL(), srv.URL)).String()
	local := loadSiteFile(t, dir, site)
	c, st, err := fleet.Startup(local, profiles)
	if err != nil {
		t.Fatal(err)
	}
	// Count what reaches the broker: every packet, by its Seq.
	seqs := map[uint64]bool{}
	var smu sync.Mutex
	sub := brokertest.Subscribe(t, brokertest.Options{ID: "platform", Brokers: []string{b.Addr()}, Username: "gw", Password: "right-Pa55", Wait: 10 * time.Second},
		"fieldlink/#", func(_ string, payload []byte) {
			// Beside the packets: the retained status and the configuration's
			// state reports. Whatever reads as a packet must follow the schema.
			if p, err := packet.Decode(payload); err == nil && p.Seq > 0 {
				testtool.ValidPacket(t, payload)
				smu.Lock()
				seqs[p.Seq] = true
				smu.Unlock()
			}
		})
	defer sub.Close()

	log := &testtool.SyncBuffer{}
	g, err := Start(c, Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer stopWithin(t, g, 30*time.Second)
	testtool.WaitFor(t, 15*time.Second, "a packet delivered", func() bool { d, _ := g.Delivery(); return d.Delivered > 0 })
	m, err := fleet.NewManager(local, st, g, fleet.Options{Profiles: profiles, Grace: 2 * time.Second, WatchEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(site, "password_file: right.pass", "password_file: remote/secrets/wrong.pass", 1)
	bundle, err := fleet.Sign([]byte(bad), fleet.Manifest{Serial: 1, NotBefore: time.Now().Add(-time.Minute), Expires: time.Now().Add(time.Hour)}, priv)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	served = bundle
	mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	start := time.Now()
	testtool.WaitFor(t, 60*time.Second, "the bundle reverted", func() bool { return m.State().Event == fleet.StateReverted })
	t.Logf("applied and reverted in %v", time.Since(start).Round(100*time.Millisecond))
	if st := m.State(); st.Last != 1 || !strings.Contains(st.Reason, "no upstream reachable") {
		t.Errorf("state %+v", st)
	}
	if r := g.Sources().Remote(); r == nil || r.State != fleet.StateReverted || r.Serial != 1 {
		t.Errorf("metrics and status page see %+v, want bundle 1 reverted", r)
	}
	if got := g.Config().Uplink.Upstreams[0].PasswordFile; got != "right.pass" {
		t.Errorf("the configuration in force has password_file %q, want the known-good right.pass", got)
	}
	// The report, retained, as the platform sees it.
	testtool.WaitFor(t, 15*time.Second, "the retained report", func() bool {
		var r fleet.Report
		raw := retainedWith(b.Addr(), "fieldlink/M1/gw-fleet/config/state", "gw", "right-Pa55")
		return json.Unmarshal([]byte(raw), &r) == nil && r.State == fleet.StateReverted && r.Serial == 1
	})
	// Nothing lost: every packet stored reaches the broker.
	testtool.WaitFor(t, 30*time.Second, "the buffer drained", func() bool { return g.Buffer().Len() == 0 })
	stored, failed := g.Counts()
	testtool.WaitFor(t, 15*time.Second, "every stored packet at the broker", func() bool {
		smu.Lock()
		defer smu.Unlock()
		return uint64(len(seqs)) >= stored
	})
	if failed != 0 {
		t.Errorf("%d packets not buffered", failed)
	}
	smu.Lock()
	defer smu.Unlock()
	for s := uint64(1); s <= stored; s++ {
		if !seqs[s] {
			t.Errorf("packet %d never reached the broker", s)
		}
	}
}

// remoteGateway runs a gateway with remote configuration from a site file
// in dir that trusts fleet.pub (written, with fleet.key, in dir) and pulls
// what serve is given. load rewrites the site file with a device interval
// and a key file, and loads it.
type remoteGateway struct {
	t    *testing.T
	dir  string
	g    *Agent
	priv ed25519.PrivateKey
	load func(interval, key string) (*config.Config, string)

	mu     sync.Mutex
	served []byte
}

func newRemoteGateway(t *testing.T) *remoteGateway {
	t.Helper()
	r := &remoteGateway{t: t, dir: t.TempDir()}
	r.priv = testtool.SigningKeyFiles(t, filepath.Join(r.dir, "fleet"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.served == nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write(r.served)
	}))
	t.Cleanup(srv.Close)
	src := `site: {id: "M1", id_field: MineId}
gateway: {id: gw-fleet}
buffer: {path: buf.db}
metrics: {listen: "off"}
buses:
  - name: b
    url: tcp://%s
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1, interval: %s}
remote_config: {url: %q, keys: [%s]}
`
	addr := emulate(t, "generic-mine-methane")
	file := filepath.Join(r.dir, "site.yaml")
	r.load = func(interval, key string) (*config.Config, string) {
		t.Helper()
		site := fmt.Sprintf(src, addr, interval, srv.URL, key)
		if err := os.WriteFile(file, []byte(site), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(file, profiles)
		if err != nil {
			t.Fatal(err)
		}
		return c, site
	}
	local, _ := r.load("100ms", "fleet.pub")
	c, st, err := fleet.Startup(local, profiles)
	if err != nil {
		t.Fatal(err)
	}
	if r.g, err = Start(c, Options{OnPacket: func(*packet.Packet) {}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopWithin(t, r.g, 30*time.Second) })
	if err := r.g.StartRemote(local, st, profiles); err != nil {
		t.Fatal(err)
	}
	return r
}

// A reread site file whose remote_config.keys cannot be read is refused
// whole: ReloadLocal returns the error and the configuration in force
// stays.
func TestReloadLocalRefusesUnreadableRemoteKeys(t *testing.T) {
	r := newRemoteGateway(t)
	if _, err := signing.GenerateFiles(filepath.Join(r.dir, "fleet2")); err != nil {
		t.Fatal(err)
	}
	reread, _ := r.load("200ms", "fleet2.pub")
	if err := os.WriteFile(filepath.Join(r.dir, "fleet2.pub"), []byte("not a key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.g.ReloadLocal(reread, profiles); err == nil || !strings.Contains(err.Error(), "remote_config.keys") {
		t.Errorf("ReloadLocal with an unreadable key file: %v; want an error naming remote_config.keys", err)
	}
	if iv := r.g.Config().Buses[0].Devices[0].Interval; iv != 100*time.Millisecond {
		t.Errorf("the configuration in force polls every %v, want the 100ms it had", iv)
	}
}

// A key replaced in its file is trusted from the SIGHUP on: a bundle it
// signs is applied.
func TestReloadLocalRereadsRemoteKeys(t *testing.T) {
	r := newRemoteGateway(t)
	priv2 := testtool.SigningKeyFiles(t, filepath.Join(r.dir, "fleet2"))
	pub2, err := os.ReadFile(filepath.Join(r.dir, "fleet2.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "fleet.pub"), pub2, 0o644); err != nil {
		t.Fatal(err)
	}
	reread, site := r.load("100ms", "fleet.pub")
	if err := r.g.ReloadLocal(reread, profiles); err != nil {
		t.Fatal(err)
	}
	r.servesAndApplies(site, priv2)
}

// A SIGHUP that changes remote_config's key list (a key added for a
// rotation) is applied without a restart: a bundle signed by the new key
// is applied, and the devices' new settings in the same file with it.
func TestReloadLocalTakesANewKeyList(t *testing.T) {
	r := newRemoteGateway(t)
	priv2 := testtool.SigningKeyFiles(t, filepath.Join(r.dir, "fleet2"))
	reread, site := r.load("200ms", "fleet.pub, fleet2.pub")
	if err := r.g.ReloadLocal(reread, profiles); err != nil {
		t.Fatalf("a new key list on SIGHUP: %v", err)
	}
	if iv := r.g.Config().Buses[0].Devices[0].Interval; iv != 200*time.Millisecond {
		t.Errorf("the reread file polls every %v, want 200ms", iv)
	}
	r.servesAndApplies(site, priv2)
}

// servesAndApplies serves site as bundle 1 signed by key, asks for a pull,
// and checks that the bundle is applied (on probation).
func (r *remoteGateway) servesAndApplies(site string, key ed25519.PrivateKey) {
	t := r.t
	t.Helper()
	b, err := fleet.Sign([]byte(site), fleet.Manifest{Serial: 1, NotBefore: time.Now().Add(-time.Minute), Expires: time.Now().Add(time.Hour)}, key)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.served = b
	r.mu.Unlock()
	m := r.g.remote.Load()
	m.PullNow()
	testtool.WaitFor(t, 30*time.Second, "the bundle signed by the new key handled", func() bool {
		st := m.State()
		return st.Serial == 1 || st.Refused != nil
	})
	if st := m.State(); st.Serial != 1 || st.Event != fleet.StateProbation {
		t.Errorf("state %+v (refused: %+v); want bundle 1 on probation", st, st.Refused)
	}
}
