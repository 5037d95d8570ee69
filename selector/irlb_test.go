package selector

import (
	"context"
	"errors"
	"fieldlink/selector/lstm"
	"math"
	"testing"
	"time"
)

// TestIRLBArithmetic is the hand-computed case, with the default
// coefficients and no model (q_{t+1} = q_t):
//
//	u0: 3200 MHz, 16384 MB, 1000 Mbps; CPU .5, Memory .5, Network .5; 10 connections
//	u1: 1600 MHz,  8192 MB, 1000 Mbps; CPU .2, Memory .2, Network .2; 10 connections
//	P0 = .3·1 + .3·1 + .4·1 = 1       L0 = .5   a0 = P/(L+.01) = 1/.51
//	P1 = .3·.5 + .3·.5 + .4·1 = .7    L1 = .2   a1 = .7/.21
//	Rank + εR = .5·10 + .5·10 + 1 + in_flight = 11 + in_flight
//	W = a / (11 + in_flight)
//
// u1 wins until it has 8 in flight: .7/.21/(11+7) = .185 > 1/.51/11 = .178,
// .7/.21/19 = .175 < .178. Then u0 (W0 = .178 > .175), then u1 twice:
// .7/.21/19 = .175 and .7/.21/20 = .167 > W0 = 1/.51/12 = .163.
func TestIRLBArithmetic(t *testing.T) {
	tb, _ := newTestTable(1, 1)
	tb.Report(0, Load{CPUMHz: 3200, MemoryMB: 16384, BandwidthMbps: 1000, CPU: 0.5, Memory: 0.5, Network: 0.5, Connections: 10})
	tb.Report(1, Load{CPUMHz: 1600, MemoryMB: 8192, BandwidthMbps: 1000, CPU: 0.2, Memory: 0.2, Network: 0.2, Connections: 10})
	s := newIRLB(irlbOptions{})
	var got []int
	for range 11 {
		i, _ := s.Pick(tb, 0)
		got = append(got, i)
		tb.Begin(i)
	}
	if want := "bbbbbbbbabb"; letters(got) != want {
		t.Fatalf("picks %s, want %s", letters(got), want)
	}
	for i, want := range [][2]float64{{1 / 0.51, 11}, {0.7 / 0.21, 11}} {
		a, b := math.Float64frombits(s.ref.published().a[i].Load()), math.Float64frombits(s.ref.published().b[i].Load())
		if !cswlcNear(a, want[0]) || !cswlcNear(b, want[1]) {
			t.Errorf("u%d: a = %v, b = %v; want %v, %v", i, a, b, want[0], want[1])
		}
	}

	// Other coefficients: P and L on CPU only, Rank on the current count
	// only, εL = .1, εR = 2: a0 = 1/.6, a1 = .5/.3, equal; b = 10 + 2 = 12.
	s = newIRLB(irlbOptions{Perf: [3]float64{1}, Load: [3]float64{2}, Rank: [2]float64{1, 0}, LoadEpsilon: 0.1, RankEpsilon: 2})
	s.Pick(tb, 0)
	for i, want := range []float64{1 / 0.6, 0.5 / 0.3} {
		if a, b := math.Float64frombits(s.ref.published().a[i].Load()), math.Float64frombits(s.ref.published().b[i].Load()); !cswlcNear(a, want) || !cswlcNear(b, 12) {
			t.Errorf("custom coefficients, u%d: a = %v, b = %v; want %v, 12", i, a, b, want)
		}
	}
}

// TestIRLBPredicts records a periodic connection count per upstream, one
// report a second, trains, and checks that Rank then uses the model's
// prediction: b = .5·C + .5·Ĉ + 1.
func TestIRLBPredicts(t *testing.T) {
	tb, c := newTestTable(1, 1)
	s := newIRLB(irlbOptions{History: 64, Model: lstm.Options{Hidden: 4, Window: 8, Epochs: 5, Seed: 3}})
	if err := s.Train(context.Background()); !errors.Is(err, lstm.ErrNotEnoughData) {
		t.Fatalf("Train with no history: %v", err)
	}
	conns := func(i, k int) int { return 50 + 10*i + int(40*math.Sin(2*math.Pi*float64(k)/16)) }
	for k := range 100 {
		for i := range 2 {
			tb.Report(i, Load{CPU: 0.5, Connections: conns(i, k)})
		}
		s.Pick(tb, 0)
		s.Pick(tb, 0) // the same reports: no new sample
		c.Advance(time.Second)
	}
	for i := range 2 {
		if n := len(s.hist[i].samples); n < 64 || n > 128 || s.hist[i].samples[n-1].Q != float64(conns(i, 99)) {
			t.Fatalf("u%d: %d samples kept, last %v", i, n, s.hist[i].samples[n-1])
		}
		if b := math.Float64frombits(s.ref.published().b[i].Load()); !cswlcNear(b, float64(conns(i, 99))+1) {
			t.Fatalf("u%d before training: b = %v, want C + 1 = %d", i, b, conns(i, 99)+1)
		}
	}
	if err := s.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := s.Model()
	if m == nil || !m.Trained() {
		t.Fatal("no trained model after Train")
	}
	tb.Probe(0, time.Millisecond, nil)
	s.Pick(tb, 0) // the next recomputation uses the new model
	for i := range 2 {
		pred := max(m.Predict(s.hist[i].samples), 0)
		if pred == float64(conns(i, 99)) {
			t.Fatalf("u%d: the model predicts the last value exactly", i)
		}
		want := 0.5*float64(conns(i, 99)) + 0.5*pred + 1
		if b := math.Float64frombits(s.ref.published().b[i].Load()); !cswlcNear(b, want) {
			t.Fatalf("u%d: b = %v, want .5·%d + .5·%.3f + 1 = %v", i, b, conns(i, 99), pred, want)
		}
	}

	// The model survives MarshalBinary and SetModel with the same weights.
	data, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var loaded lstm.Model
	if err := loaded.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	s2 := newIRLB(irlbOptions{History: 64})
	if err := s2.SetModel(&loaded); err != nil {
		t.Fatal(err)
	}
	s2.hist = s.hist
	s2.Pick(tb, 0)
	for i := range 2 {
		if b, b2 := s.ref.published().b[i].Load(), s2.ref.published().b[i].Load(); b != b2 {
			t.Fatalf("u%d: b = %v with the trained model, %v with it reloaded", i, math.Float64frombits(b), math.Float64frombits(b2))
		}
	}
	if err := s2.SetModel(lstm.New(lstm.Options{})); !errors.Is(err, lstm.ErrBadModel) {
		t.Fatalf("SetModel of an untrained model: %v", err)
	}

	// A retired index given to a new upstream starts a new history.
	tb.Retire(1)
	for range MaxUpstreams - 2 {
		tb.Add("x"+time.Duration(tb.Len()).String(), 1)
	}
	if j, err := tb.Add("fresh", 1); err != nil || j != 1 {
		t.Fatalf("the new upstream took index %d (%v), want 1", j, err)
	}
	tb.Report(1, Load{Connections: 7})
	s.Pick(tb, 0)
	if h := s.hist[1].samples; len(h) != 1 || h[0].Q != 7 {
		t.Fatalf("reused index 1: history %v, want one sample of 7", h)
	}
}
