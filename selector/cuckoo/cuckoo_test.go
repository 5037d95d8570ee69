package cuckoo

import (
	"math"
	"slices"
	"testing"
)

func sphere(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return s
}

// TestCuckooSphere minimises the sphere function Σ x² in 5 dimensions over
// [−5, 10]⁵ (optimum 0 at the origin, off the centre of the box), and checks
// that a seed fixes the result.
func TestCuckooSphere(t *testing.T) {
	lo, hi := make([]float64, 5), make([]float64, 5)
	for j := range lo {
		lo[j], hi[j] = -5, 10
	}
	cs := New(25, 400, 0.25)
	best, f := cs.Minimize(sphere, lo, hi, 42)
	t.Logf("sphere, 25 nests × 400 generations: f = %.3g at %.2g", f, best)
	if f > 1e-6 {
		t.Fatalf("f = %g at %v, want < 1e-6", f, best)
	}
	if sphere(best) != f {
		t.Fatalf("returned fitness %v, f(best) = %v", f, sphere(best))
	}
	first := slices.Clone(best)
	again, f2 := New(25, 400, 0.25).Minimize(sphere, lo, hi, 42)
	if f2 != f || !slices.Equal(first, again) {
		t.Fatalf("same seed, different results: %v at %v, then %v at %v", f, first, f2, again)
	}
	// A reused search, same seed: same result, and no allocation.
	if again, f3 := cs.Minimize(sphere, lo, hi, 42); f3 != f || !slices.Equal(first, again) {
		t.Fatalf("reused search differs: %v, then %v", f, f3)
	}
	if a := testing.AllocsPerRun(1, func() { cs.Minimize(sphere, lo, hi, 7) }); a != 0 {
		t.Fatalf("a reused search allocates %.0f times", a)
	}
	if _, f4 := cs.Minimize(sphere, lo, hi, 43); f4 == f {
		t.Fatalf("another seed gave the very same fitness %v", f4)
	}
}

// TestCuckooDiscrete is the search cswlc runs: over a step function, the
// index of the smallest of 40 values.
func TestCuckooDiscrete(t *testing.T) {
	vals := make([]float64, 40)
	for i := range vals {
		vals[i] = 0.5 + 0.4*math.Sin(float64(i)*1.7) // minimum at one index
	}
	want := 0
	for i, v := range vals {
		if v < vals[want] {
			want = i
		}
	}
	f := func(x []float64) float64 { return vals[min(int(x[0]), len(vals)-1)] }
	cs := New(0, 0, 0)
	for seed := range uint64(20) {
		best, _ := cs.Minimize(f, []float64{0}, []float64{40}, seed)
		if got := min(int(best[0]), 39); got != want {
			t.Fatalf("seed %d: found index %d (%.4f), want %d (%.4f)", seed, got, vals[got], want, vals[want])
		}
	}
}

// TestMantegnaSteps checks the Lévy steps: σ_u for β = 1.5, symmetry, and
// a heavy tail that falls as |s|^−1.5 — P(|s| > 10) / P(|s| > 100) near
// 10^1.5 ≈ 31.6 — where a Gaussian of the same spread has no mass at all.
func TestMantegnaSteps(t *testing.T) {
	cs := New(0, 0, 0)
	if math.Abs(cs.sigmaU-0.696574502) > 1e-6 {
		t.Fatalf("σ_u(1.5) = %.9f, want 0.696574502", cs.sigmaU)
	}
	cs.pcg.Seed(1, 2)
	const n = 200_000
	var pos, over1, over10, over100 int
	var sumSq float64
	abs := make([]float64, n)
	for k := range n {
		s := cs.levy()
		abs[k] = math.Abs(s)
		if s > 0 {
			pos++
		}
		if abs[k] > 1 {
			over1++
		}
		if abs[k] > 10 {
			over10++
		}
		if abs[k] > 100 {
			over100++
		}
		sumSq += s * s
	}
	slices.Sort(abs)
	median := abs[n/2]
	ratio := float64(over10) / float64(over100)
	t.Logf("%d steps: median |s| %.3f, P(|s|>1) %.4f, P(|s|>10) %.5f, P(|s|>100) %.6f, ratio %.1f, max %.3g",
		n, median, float64(over1)/n, float64(over10)/n, float64(over100)/n, ratio, abs[n-1])
	if f := float64(pos) / n; math.Abs(f-0.5) > 0.005 {
		t.Errorf("share of positive steps %.4f, want 0.5", f)
	}
	// A Gaussian with this median |s| (σ = median/0.6745) exceeds 10 with
	// probability far below 1e-20.
	if p := float64(over10) / n; p < 5e-3 {
		t.Errorf("P(|s| > 10) = %.5f: not heavy-tailed", p)
	}
	if ratio < 20 || ratio > 50 {
		t.Errorf("P(|s|>10)/P(|s|>100) = %.1f, want near 31.6 (tail index 1.5)", ratio)
	}
}
