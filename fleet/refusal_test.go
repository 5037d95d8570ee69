package fleet

import (
	"context"
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
	r.setVitals(Vitals{UpstreamUp: false, Answering: 1})
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

// A temporary refusal keeps no ETag: once its cause is gone, the next
// pull applies the same bundle.
func TestTemporaryRefusalPullsAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		// cause sets the refusal's cause up and returns the bundle and
		// what removes the cause.
		cause func(r *rig) ([]byte, func())
	}{
		{"not valid yet", "not valid yet", func(r *rig) ([]byte, func()) {
			site := []byte(fmt.Sprintf(localSite, r.srv.URL))
			b, err := Sign(site, Manifest{Serial: 1, NotBefore: b0.Add(time.Hour), Expires: b0.Add(24 * time.Hour)}, r.priv)
			if err != nil {
				r.t.Fatal(err)
			}
			return b, func() { r.advance(2 * time.Hour) }
		}},
		{"another bundle on probation", "still on probation", func(r *rig) ([]byte, func()) {
			r.pull(r.bundle(1, "", ""))
			return r.bundle(2, "", ""), func() { r.advance(2 * time.Minute) }
		}},
		{"download cut short", "not a bundle", func(r *rig) ([]byte, func()) {
			b := r.bundle(1, "", "")
			r.srv.mu.Lock()
			r.srv.short = len(b) / 2
			r.srv.mu.Unlock()
			return b, func() {}
		}},
		{"disk write failed", "cannot keep it on disk", func(r *rig) ([]byte, func()) {
			in := filepath.Join(Dir(r.local), "bundle-1.yaml")
			if err := os.MkdirAll(in, 0o750); err != nil {
				r.t.Fatal(err)
			}
			return r.bundle(1, "", ""), func() { _ = os.Remove(in) }
		}},
		{"state not recorded", "cannot record it", func(r *rig) ([]byte, func()) {
			in := filepath.Join(Dir(r.local), "state.json")
			if err := os.MkdirAll(in, 0o750); err != nil {
				r.t.Fatal(err)
			}
			return r.bundle(1, "", ""), func() { _ = os.Remove(in) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			b, clear := tc.cause(r)
			want := r.m.State().Serial + 1
			if rep := r.pull(b); rep.State != StateRefused || !strings.Contains(rep.Reason, tc.reason) {
				t.Fatalf("report %+v, want refused saying %q", rep, tc.reason)
			}
			clear()
			r.m.fetch(context.Background())
			if st := r.m.State(); st.Serial != want {
				rep, _ := r.gw.last()
				t.Errorf("pulled again once the cause is gone: serial %d in force, want %d (report %+v, %d not-modified)", st.Serial, want, rep, r.srv.not)
			}
		})
	}
}

// A permanent refusal keeps its ETag: the same bundle is not downloaded
// again.
func TestPermanentRefusalKeepsTheETag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		bundle func(r *rig) []byte
	}{
		{"bad signature", "bad signature", func(r *rig) []byte {
			_, other := keypair(r.t)
			b, _ := Sign([]byte(fmt.Sprintf(localSite, r.srv.URL)), Manifest{Serial: 9, NotBefore: b0.Add(-time.Hour), Expires: b0.Add(time.Hour)}, other)
			return b
		}},
		{"another gateway's", "for other gateways", func(r *rig) []byte { return r.bundle(9, "", "", "gw-77") }},
		{"expired", "expired", func(r *rig) []byte {
			b, _ := Sign([]byte(fmt.Sprintf(localSite, r.srv.URL)), Manifest{Serial: 9, NotBefore: b0.Add(-2 * time.Hour), Expires: b0.Add(-time.Hour)}, r.priv)
			return b
		}},
		{"serial not above", "not above the serial in force", func(r *rig) []byte { return r.bundle(4, "", "") }},
		{"serial reverted", "was reverted", func(r *rig) []byte {
			r.pull(r.bundle(6, "", ""))
			r.setVitals(Vitals{})
			r.advance(time.Second)
			r.advance(6 * time.Second)
			r.setVitals(Vitals{UpstreamUp: true, Answering: 1})
			if st := r.m.State(); st.Event != StateReverted {
				r.t.Fatalf("bundle 6 not reverted: %+v", st)
			}
			return r.bundle(6, "", "")
		}},
		{"does not merge", "remote_config is local to each gateway", func(r *rig) []byte {
			return r.bundle(9, "probation: 1m", "probation: 2m")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.pull(r.bundle(5, "", ""))
			r.advance(2 * time.Minute) // 5 in force
			if rep := r.pull(tc.bundle(r)); rep.State != StateRefused || !strings.Contains(rep.Reason, tc.reason) {
				t.Fatalf("report %+v, want refused saying %q", rep, tc.reason)
			}
			not := r.srv.not
			r.m.fetch(context.Background())
			if r.srv.not != not+1 {
				t.Errorf("the refused bundle downloaded again: %d not-modified, want %d", r.srv.not, not+1)
			}
		})
	}
}

// A confirmed bundle clears the ETag: what was refused during its
// probation is downloaded again.
func TestConfirmClearsTheETag(t *testing.T) {
	r := newRig(t)
	r.pull(r.bundle(1, "", ""))
	if r.m.State().ETag == "" {
		t.Fatal("no etag kept for the bundle applied")
	}
	r.advance(2 * time.Minute)
	if st := r.m.State(); st.Event != StateApplied || st.ETag != "" {
		t.Errorf("confirmed: state %q, etag %q; want applied, no etag", st.Event, st.ETag)
	}
}

// At a start the manager reports what happened last: a refusal made after
// the configuration in force was confirmed, else the configuration in
// force.
func TestStartReportsWhatHappenedLast(t *testing.T) {
	r := newRig(t)
	r.pull(r.bundle(1, "", ""))
	r.advance(2 * time.Minute)
	r.advance(time.Minute)
	if rep := r.pull(r.bundle(2, "", "", "gw-77")); rep.State != StateRefused {
		t.Fatalf("another gateway's bundle: %+v", rep)
	}
	r.start()
	r.m.report()
	if rep, _ := r.gw.last(); rep.State != StateRefused || rep.Serial != 2 {
		t.Errorf("at a start after a refusal: %+v; want bundle 2 refused", rep)
	}
	r.pull(r.bundle(3, "", ""))
	r.start() // bundle 3 on probation: reverted
	r.m.report()
	if rep, _ := r.gw.last(); rep.State != StateReverted || rep.Serial != 3 {
		t.Errorf("at a start that reverted bundle 3: %+v; want 3 reverted", rep)
	}
}
