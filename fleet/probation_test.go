package fleet

import (
	"strings"
	"testing"
	"time"
)

// boot restarts the gateway as a power cycle does: nothing is connected
// and no device has answered yet when the manager starts and pulls.
func (r *rig) boot() {
	r.t.Helper()
	r.setVitals(Vitals{})
	r.start()
}

// A bundle pulled at boot, before any upstream is connected or any device
// has answered, must reach what the configuration before it reached (the
// local file, which had an upstream up and every device answering): one
// whose uplink never comes up is reverted at the end of its probation, not
// confirmed because nothing was worse than nothing.
func TestBundleAtBootThatBreaksTheUplinkIsReverted(t *testing.T) {
	r := newRig(t)
	// The local file runs: an upstream up, every device answering.
	for range 3 {
		r.advance(2 * time.Second)
	}
	r.boot()
	rep := r.pull(r.bundle(1, "slave: 1}", "slave: 1, interval: 9s}"))
	if rep.State != StateProbation {
		t.Fatalf("bundle at boot: %+v; want probation", rep)
	}
	// Its devices answer, its uplink never connects ("not Authorized").
	r.setVitals(Vitals{UpstreamUp: false, Answering: 1})
	for range 30 {
		r.advance(2 * time.Second)
	}
	st := r.m.State()
	if st.Event != StateReverted || st.Last != 1 || st.KnownGood != 0 {
		t.Fatalf("a bundle at boot whose uplink never came up, after its 1m probation: state %q serial %d known-good %d (%s); want 1 reverted", st.Event, st.Last, st.KnownGood, st.Reason)
	}
	if !strings.Contains(st.Reason, "never reached") || !strings.Contains(st.Reason, "an upstream up") {
		t.Errorf("reason %q does not say what it never reached", st.Reason)
	}
	// A restart starts from the local file, not from the bundle.
	if _, st, err := Startup(r.local, profiles); err != nil || st.KnownGood != 0 {
		t.Errorf("startup after the revert: known-good %d, %v; want the local file", st.KnownGood, err)
	}
}

// A bundle at boot that does bring the uplink up and the devices back is
// confirmed, and what it reached is what the next bundle must reach.
func TestBundleAtBootThatComesUpIsConfirmed(t *testing.T) {
	r := newRig(t)
	r.advance(2 * time.Second)
	r.boot()
	r.pull(r.bundle(1, "slave: 1}", "slave: 1, interval: 9s}"))
	r.advance(2 * time.Second) // still connecting
	r.setVitals(Vitals{UpstreamUp: true, Answering: 1})
	for range 30 {
		r.advance(2 * time.Second)
	}
	st := r.m.State()
	if st.Event != StateApplied || st.KnownGood != 1 {
		t.Fatalf("a bundle at boot that came up: state %q known-good %d (%s); want 1 confirmed", st.Event, st.KnownGood, st.Reason)
	}
	if st.Reached != (Vitals{UpstreamUp: true, Answering: 1}) {
		t.Errorf("reached %+v recorded at the confirmation; want an upstream up, every device", st.Reached)
	}
}

// A bundle whose devices stay quiet is reverted at the end of its
// probation when the configuration before it had them answering, even if
// nothing answered when it was applied.
func TestBundleAtBootWithFewerDevicesIsReverted(t *testing.T) {
	r := newRig(t)
	r.advance(2 * time.Second)
	r.boot()
	r.pull(r.bundle(1, "slave: 1}", "slave: 2}"))
	r.setVitals(Vitals{UpstreamUp: true, Answering: 0})
	for range 30 {
		r.advance(2 * time.Second)
	}
	if st := r.m.State(); st.Event != StateReverted || !strings.Contains(st.Reason, "100% of devices answering") {
		t.Fatalf("a bundle at boot whose devices never answered: state %q (%s); want reverted", st.Event, st.Reason)
	}
}
