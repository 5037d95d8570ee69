package lab

import "testing"

// TestFleetSpread holds the default selector to its fleet targets, over
// two seeds: on the NATS cluster (S13a) the busiest node at most 1.5× its
// fair share in steady state and 1.25× with a node down; on brokers that
// answer alike (S13b) at most 1.25× in both; the restarted node carries a
// sixth of the traffic again at most 2 s after round robin's gateways give
// it that (the gateways' reconnections, 1–2 s after its return, bound
// both); with a node truly slow (S13c) its share falls below a tenth.
func TestFleetSpread(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		for _, c := range []struct {
			name         string
			steady, down float64
		}{{"S13a", 1.5, 1.25}, {"S13b", 1.25, 1.25}} {
			d, rr := fleetTrial(t, c.name, "drf_cswlc", seed), fleetTrial(t, c.name, "round_robin", seed)
			t.Logf("%s seed %d drf_cswlc: busiest %.2f steady, %.2f down, back %v s (round_robin %v s), swing %.2f", c.name, seed, d.BusiestSteady, d.BusiestDown, d.Back, rr.Back, d.Swing)
			if d.BusiestSteady > c.steady || d.BusiestDown > c.down {
				t.Errorf("%s seed %d: drf_cswlc's busiest node took %.2f× its fair share in steady state, %.2f× with a node down; want at most %.2f× and %.2f×", c.name, seed, d.BusiestSteady, d.BusiestDown, c.steady, c.down)
			}
			if !(d.Back <= rr.Back+2) {
				t.Errorf("%s seed %d: the restarted node carried a sixth of the traffic %v s after its return, round robin's %v s", c.name, seed, d.Back, rr.Back)
			}
		}
		if s := fleetTrial(t, "S13c", "drf_cswlc", seed); !(s.FaultyShare < 0.1) {
			t.Errorf("S13c seed %d: the slow node got %.3f of the traffic during the fault, want below 0.1", seed, s.FaultyShare)
		}
	}
}
