package agent

import (
	"context"
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

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/config"
	"fieldlink/fleet"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/signing"
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
	for name, pw := range map[string]string{"right.pass": "right-Pa55\n", "wrong.pass": "wrong-Pa55\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := signing.GenerateFiles(filepath.Join(dir, "fleet")); err != nil {
		t.Fatal(err)
	}
	priv, err := signing.LoadPrivate(filepath.Join(dir, "fleet.key"))
	if err != nil {
		t.Fatal(err)
	}
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

	site := fmt.Sprintf(`site: {id: "M1", id_field: MineId}
gateway: {id: gw-fleet}
buffer: {path: buf.db}
metrics: {listen: "off"}
buses:
  - name: b
    url: tcp://%s
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}
uplink:
  probe: {interval: 200ms, timeout: 100ms}
  upstreams:
    - {url: %q, username: gw, password_file: right.pass}
remote_config: {url: %q, keys: [fleet.pub], probation: 1m}
`, emulate(t, "generic-mine-methane"), b.URL(), srv.URL)
	file := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(file, []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	local, err := config.Load(file, profiles)
	if err != nil {
		t.Fatal(err)
	}
	c, st, err := fleet.Startup(local, profiles)
	if err != nil {
		t.Fatal(err)
	}
	// Count what reaches the broker: every packet, by its Seq.
	seqs := map[uint64]bool{}
	var smu sync.Mutex
	o := paho.NewClientOptions().AddBroker("tcp://" + b.Addr()).SetClientID("platform").SetUsername("gw").SetPassword("right-Pa55").
		SetCleanSession(true).SetAutoReconnect(false)
	sub := paho.NewClient(o)
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer sub.Disconnect(0)
	sub.Subscribe("fieldlink/#", 1, func(_ paho.Client, m paho.Message) {
		if p, err := packet.Decode(m.Payload()); err == nil && p.Seq > 0 {
			smu.Lock()
			seqs[p.Seq] = true
			smu.Unlock()
		}
	}).WaitTimeout(10 * time.Second)

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
	bad := strings.Replace(site, "password_file: right.pass", "password_file: wrong.pass", 1)
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
