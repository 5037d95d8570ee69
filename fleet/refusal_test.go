package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A refusal never changes the configuration in force. Bundle 2 is
// applied; a bundle signed by an unknown key is refused during its
// probation; 2 is still confirmed at the end of it, a restart then runs
// 2, and bundle 4, which loses every upstream, is reverted to 2, not to
// the local file.
func TestRefusalDuringProbationKeepsTheRevert(t *testing.T) {
	r := newRig(t)
	if rep := r.pull(r.bundle(2, "slave: 1}", "slave: 1, interval: 7s}")); rep.State != StateProbation || rep.Serial != 2 {
		t.Fatalf("bundle 2: %+v", rep)
	}
	_, unknown := keypair(t)
	forged, err := Sign([]byte(fmt.Sprintf(localSite, r.srv.URL)), Manifest{Serial: 3, NotBefore: b0.Add(-time.Hour), Expires: b0.Add(time.Hour)}, unknown)
	if err != nil {
		t.Fatal(err)
	}
	if rep := r.pull(forged); rep.State != StateRefused || !strings.Contains(rep.Reason, "bad signature") {
		t.Fatalf("a bundle signed by an unknown key: %+v", rep)
	}
	if st := r.m.State(); st.Event != StateProbation || st.Serial != 2 {
		t.Fatalf("after a refusal during bundle 2's probation: state %q, serial %d; want probation, 2", st.Event, st.Serial)
	}
	r.advance(61 * time.Second)
	if rep, _ := r.gw.last(); rep.State != StateApplied || rep.Serial != 2 || r.m.State().KnownGood != 2 {
		t.Fatalf("after bundle 2's probation: report %+v, known-good %d; want 2 confirmed", rep, r.m.State().KnownGood)
	}

	c, st, err := Startup(r.local, profiles)
	if err != nil || st.Serial != 2 || c.Buses[0].Devices[0].Interval != 7*time.Second {
		t.Fatalf("restart: serial %d, interval %v, %v; want bundle 2 (7s)", st.Serial, c.Buses[0].Devices[0].Interval, err)
	}
	r.start()

	if rep := r.pull(r.bundle(4, "slave: 1}", "slave: 1, interval: 9s}")); rep.State != StateProbation || rep.Serial != 4 {
		t.Fatalf("bundle 4: %+v", rep)
	}
	r.setHealth(Health{UpstreamUp: false, Answering: 1})
	r.advance(2 * time.Second)
	r.advance(6 * time.Second)
	rep, n := r.gw.last()
	if rep.State != StateReverted || rep.Serial != 4 {
		t.Fatalf("bundle 4 with every upstream lost: %+v", rep)
	}
	if iv := r.gw.loaded[n-1].Buses[0].Devices[0].Interval; iv != 7*time.Second {
		t.Errorf("reverted to interval %v, want bundle 2's 7s (the local file's is 5s)", iv)
	}
	if st := r.m.State(); st.Serial != 2 || st.KnownGood != 2 {
		t.Errorf("after the revert: serial %d, known-good %d; want 2", st.Serial, st.KnownGood)
	}
}

// A restart after a refusal during a probation reverts the bundle that was
// on probation, as any restart during a probation does.
func TestRestartAfterRefusalDuringProbation(t *testing.T) {
	r := newRig(t)
	r.pull(r.bundle(1, "slave: 1}", "slave: 1, interval: 7s}"))
	r.advance(2 * time.Minute)
	r.pull(r.bundle(2, "slave: 1}", "slave: 1, interval: 9s}"))
	if rep := r.pull(r.bundle(3, "", "", "gw-77")); rep.State != StateRefused {
		t.Fatalf("another gateway's bundle: %+v", rep)
	}
	c, st, err := Startup(r.local, profiles)
	if err != nil || st.Serial != 1 || st.Event != StateReverted || !slices.Contains(st.Reverted, 2) || c.Buses[0].Devices[0].Interval != 7*time.Second {
		t.Fatalf("restart: %+v, interval %v, %v; want bundle 2 reverted and bundle 1 (7s) in force", st, c.Buses[0].Devices[0].Interval, err)
	}
}

// A state.json written while a refusal could overwrite a probation
// ("state": "refused" with probation_until) is read as the probation it
// was: the restart reverts the bundle.
func TestStartupReadsARefusedProbation(t *testing.T) {
	r := newRig(t)
	r.pull(r.bundle(1, "slave: 1}", "slave: 1, interval: 7s}"))
	r.advance(2 * time.Minute)
	r.pull(r.bundle(2, "slave: 1}", "slave: 1, interval: 9s}"))
	old := `{
  "serial": 2,
  "known_good": 1,
  "state": "refused",
  "reason": "bad signature: no key verifies it",
  "at": "2026-12-02T08:02:30Z",
  "last_serial": 0,
  "probation_until": "2026-12-02T08:03:00Z",
  "baseline": {"UpstreamUp": true, "Answering": 1},
  "etag": "\"abc\""
}
`
	if err := os.WriteFile(filepath.Join(Dir(r.local), "state.json"), []byte(old), 0o640); err != nil {
		t.Fatal(err)
	}
	c, st, err := Startup(r.local, profiles)
	if err != nil || st.Serial != 1 || st.Event != StateReverted || !slices.Contains(st.Reverted, 2) || c.Buses[0].Devices[0].Interval != 7*time.Second {
		t.Fatalf("restart: %+v, interval %v, %v; want bundle 2 reverted and bundle 1 (7s) in force", st, c.Buses[0].Devices[0].Interval, err)
	}
	if st.Refused == nil || st.Refused.Reason != "bad signature: no key verifies it" {
		t.Errorf("the refusal read from the old state: %+v", st.Refused)
	}
	if st.ETag != "" {
		t.Errorf("etag %q kept across the revert", st.ETag)
	}
}
