package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/config"
	"fieldlink/internal/signing"
	"fieldlink/internal/testtool"
)

// reloaded writes the local site file again with old replaced by new and
// loads it, as a SIGHUP does.
func (r *rig) reloaded(old, new string) *config.Config {
	r.t.Helper()
	file := filepath.Join(r.dir, "site.yaml")
	site := strings.Replace(fmt.Sprintf(localSite, r.srv.URL), old, new, 1)
	if err := os.WriteFile(file, []byte(site), 0o644); err != nil {
		r.t.Fatal(err)
	}
	c, err := config.Load(file, profiles)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// A SIGHUP that changes remote_config.keys trusts the new keys at once.
func TestSetLocalReloadsKeys(t *testing.T) {
	r := newRig(t)
	priv2 := testtool.SigningKeyFiles(t, filepath.Join(r.dir, "fleet2"))
	if err := r.m.SetLocal(r.reloaded("keys: [fleet.pub]", "keys: [fleet2.pub]")); err != nil {
		t.Fatal(err)
	}
	site := strings.Replace(fmt.Sprintf(localSite, r.srv.URL), "keys: [fleet.pub]", "keys: [fleet2.pub]", 1)
	b, err := Sign([]byte(site), Manifest{Serial: 1, NotBefore: b0.Add(-time.Hour), Expires: b0.Add(time.Hour)}, priv2)
	if err != nil {
		t.Fatal(err)
	}
	if rep := r.pull(b); rep.State != StateProbation || rep.Serial != 1 {
		t.Errorf("a bundle signed by the key the SIGHUP brought: %+v; want probation", rep)
	}
	if rep := r.pull(r.bundle(2, "", "")); rep.State != StateRefused || !strings.Contains(rep.Reason, "bad signature") {
		t.Errorf("a bundle signed by the key the SIGHUP took away: %+v; want refused", rep)
	}
}

// A SIGHUP whose key file cannot be read keeps the keys in force, and says
// so.
func TestSetLocalKeepsKeysItCannotRead(t *testing.T) {
	r := newRig(t)
	if _, err := signing.GenerateFiles(filepath.Join(r.dir, "fleet2")); err != nil {
		t.Fatal(err)
	}
	c := r.reloaded("keys: [fleet.pub]", "keys: [fleet2.pub]")
	if err := os.WriteFile(filepath.Join(r.dir, "fleet2.pub"), []byte("not a key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := r.m.SetLocal(c)
	if err == nil || !strings.Contains(err.Error(), "remote_config.keys") {
		t.Errorf("SetLocal with an unreadable key file: %v; want an error naming remote_config.keys", err)
	}
	if rep := r.pull(r.bundle(1, "", "")); rep.State != StateProbation {
		t.Errorf("a bundle signed by the key in force: %+v; want probation", rep)
	}
}

// SetLocal (SIGHUP) runs while Run starts and pulls: the next pull uses
// the new file's URL. Run with -race: the SIGHUP follows Run's first
// report, with nothing that orders it before Run's first pull.
func TestSetLocalDuringRun(t *testing.T) {
	r := newRig(t)
	other := newServer(t)
	c := r.reloaded(r.srv.URL, other.URL)
	r.gw.reported = make(chan Report, 1)
	r.srv.got = make(chan struct{}, 2)
	other.got = r.srv.got // the first pull goes to either URL
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-r.gw.reported
	if err := r.m.SetLocal(c); err != nil {
		t.Fatal(err)
	}
	<-r.srv.got // Run's first pull began: an early pull is taken at once after the gap
	r.mu.Lock()
	r.mono += pullEvery
	r.mu.Unlock()
	r.m.PullNow()
	testtool.WaitFor(t, 30*time.Second, "a pull from the new URL", func() bool {
		other.mu.Lock()
		defer other.mu.Unlock()
		return other.gets > 0
	})
}

// SetLocal (SIGHUP) runs while a pull is under way. Run with -race.
func TestSetLocalDuringFetch(t *testing.T) {
	r := newRig(t)
	r.srv.serve(r.bundle(1, "", ""))
	c := r.reloaded("slave: 1}", "slave: 1, interval: 7s}")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.m.fetch(context.Background()) }()
	if err := r.m.SetLocal(c); err != nil {
		t.Error(err)
	}
	wg.Wait()
	if st := r.m.State(); st.Serial != 1 {
		t.Errorf("serial %d in force, want 1", st.Serial)
	}
}

// A reread site file the gateway refuses (one only a restart applies)
// changes nothing in the manager either: it pulls from the URL in force.
func TestSetLocalRefusedByTheGateway(t *testing.T) {
	r := newRig(t)
	other := newServer(t)
	c := r.reloaded(r.srv.URL, other.URL)
	r.gw.mu.Lock()
	r.gw.failLoad = errors.New("a restart is needed to apply it")
	r.gw.mu.Unlock()
	if err := r.m.SetLocal(c); err == nil || !strings.Contains(err.Error(), "restart is needed") {
		t.Errorf("SetLocal of a file the gateway refuses: %v; want the gateway's error", err)
	}
	r.gw.mu.Lock()
	r.gw.failLoad = nil
	r.gw.mu.Unlock()
	r.m.fetch(context.Background())
	if other.gets != 0 || r.srv.gets != 1 {
		t.Errorf("pulled %d times from the refused file's URL, %d from the URL in force; want 0, 1", other.gets, r.srv.gets)
	}
}

// A reread site file is reloaded merged with the bundle in force.
func TestSetLocalKeepsTheBundleInForce(t *testing.T) {
	r := newRig(t)
	// A bundle that leaves remote_config out, as the local file changes it.
	site := strings.Replace(fmt.Sprintf(localSite, r.srv.URL), "slave: 1}", "slave: 1, interval: 7s}", 1)
	site = site[:strings.Index(site, "remote_config:")]
	b, err := Sign([]byte(site), Manifest{Serial: 1, NotBefore: b0.Add(-time.Hour), Expires: b0.Add(time.Hour)}, r.priv)
	if err != nil {
		t.Fatal(err)
	}
	if rep := r.pull(b); rep.State != StateProbation {
		t.Fatalf("%+v", rep)
	}
	if err := r.m.SetLocal(r.reloaded("probation: 1m", "probation: 2m")); err != nil {
		t.Fatal(err)
	}
	_, n := r.gw.last()
	if c := r.gw.loaded[n-1]; n != 2 || c.Buses[0].Devices[0].Interval != 7*time.Second || c.RemoteConfig.Probation != 2*time.Minute {
		t.Errorf("%d reloads, the last with interval %v and probation %v; want 2, bundle 1's 7s and the reread file's 2m", n, c.Buses[0].Devices[0].Interval, c.RemoteConfig.Probation)
	}
}
