package lab

import (
	"math"
	"strings"
	"testing"
	"time"

	"fieldlink/selector"
)

func TestKnobsRoundTrip(t *testing.T) {
	o := selector.DRFCSWLCOptions{Latency: 2.5, Reported: 0.05, Decay: 9547 * time.Millisecond, Interval: 120 * time.Millisecond}
	name := knobString(o)
	got, err := parseKnobs(strings.TrimPrefix(name, "drf_cswlc:"))
	if err != nil {
		t.Fatal(err)
	}
	if got.WithDefaults() != o.WithDefaults() {
		t.Errorf("%s read back as %+v, want %+v", name, got, o.WithDefaults())
	}
	if _, err := NewStrategy(name); err != nil {
		t.Errorf("NewStrategy(%q): %v", name, err)
	}
	for _, bad := range []string{"drf_cswlc:speed=3", "drf_cswlc:latency", "drf_cswlc:latency=x"} {
		if _, err := NewStrategy(bad); err == nil {
			t.Errorf("NewStrategy(%q) accepted", bad)
		}
	}
}

func TestTargetMisses(t *testing.T) {
	est := func(v float64) Estimate { return Estimate{Mean: v} }
	for _, c := range []struct {
		scenario string
		cell     Cell
		miss     bool
	}{
		{"S2", Cell{Success1s: est(0.9995)}, false},
		{"S2", Cell{Success1s: est(0.9985)}, true},
		{"S11", Cell{FaultyShare: est(0.004)}, false},
		{"S4c", Cell{FaultyShare: est(0.03)}, true},
		{"S7", Cell{JoinPeak: est(1.1), JoinRamp: Censored{Estimate: est(2)}}, false},
		{"S7", Cell{JoinPeak: est(1.5), JoinRamp: Censored{Estimate: est(2)}}, true},
		{"S7", Cell{JoinPeak: est(1.1), JoinRamp: Censored{Estimate: est(2), Never: 1}}, true},
		{"S1", Cell{}, false},
	} {
		got := targetMisses(c.scenario, c.cell)
		if (got > 0) != c.miss || math.IsNaN(got) || math.IsInf(got, 0) {
			t.Errorf("%s %+v: miss %v, want a miss: %v", c.scenario, c.cell, got, c.miss)
		}
	}
}
