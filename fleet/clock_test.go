package fleet

import (
	"testing"
	"time"
)

// Probation and grace are durations measured by the monotonic clock: a
// wall clock stepped forward (NTP after a boot without a real-time clock)
// neither confirms nor reverts a bundle early.
func TestWallClockStepDoesNotShortenProbation(t *testing.T) {
	r := newRig(t)
	if rep := r.pull(r.bundle(1, "", "")); rep.State != StateProbation {
		t.Fatalf("%+v", rep)
	}
	r.stepWall(3 * time.Hour)
	if st := r.m.State(); st.Event != StateProbation {
		t.Fatalf("the wall clock stepped 3h forward, no time passed: state %q; want probation", st.Event)
	}
	r.setVitals(Vitals{UpstreamUp: false, Answering: 1})
	r.advance(time.Second) // the upstream is lost
	r.stepWall(time.Hour)
	if st := r.m.State(); st.Event != StateProbation {
		t.Fatalf("the upstream lost for 1s and the wall clock stepped 1h: state %q (%s); want probation", st.Event, st.Reason)
	}
	r.setVitals(Vitals{UpstreamUp: true, Answering: 1})
	r.advance(58 * time.Second)
	if st := r.m.State(); st.Event != StateProbation {
		t.Fatalf("59s of a 1m probation passed: state %q; want probation", st.Event)
	}
	r.advance(time.Second)
	if st := r.m.State(); st.Event != StateApplied || st.KnownGood != 1 {
		t.Fatalf("1m of a 1m probation passed: state %q, known-good %d; want 1 confirmed", st.Event, st.KnownGood)
	}
}

// A wall clock stepped backwards does not lengthen a probation either.
func TestWallClockStepBackDoesNotLengthenProbation(t *testing.T) {
	r := newRig(t)
	r.pull(r.bundle(1, "", ""))
	r.stepWall(-24 * time.Hour)
	r.advance(time.Minute)
	if st := r.m.State(); st.Event != StateApplied || st.KnownGood != 1 {
		t.Fatalf("1m of a 1m probation passed, the wall clock stepped back a day: state %q; want applied", st.Event)
	}
}
