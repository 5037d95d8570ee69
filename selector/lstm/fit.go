package lstm

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
)

// example is one training window: inputs start at x[off] for window
// steps, and the normalised target.
type example struct {
	x      []float64 // window × 2, normalised
	target float64
}

// Fit trains the model from scratch on the series, and returns the mean
// squared error of the last epoch, in normalised units. Each series is one
// sequence of samples in time order (IRLB: one per upstream); every
// Window + 1 consecutive samples of a series make a training window, the
// most recent MaxWindows windows in all. The Z-score normalisation is
// fitted on the same samples. Fit checks ctx between minibatches; on an
// error the model is left untrained.
//
// The cost is Epochs × windows × Window steps of about 24·H·(H+2)
// floating-point operations each (H = Hidden).
func (m *Model) Fit(ctx context.Context, series ...[]Sample) (float64, error) {
	if m.hidden <= 0 || len(m.p) != params(m.hidden) { // a zero LSTM
		*m = *New(m.opt)
	}
	m.trained = false
	m.opt.Hidden, m.opt.Window = m.hidden, m.window
	m.opt = m.opt.WithDefaults()
	W := m.window
	total := 0
	for _, s := range series {
		total += max(len(s)-W, 0)
	}
	if total == 0 {
		return 0, fmt.Errorf("%w: need %d points in a series, have %d series", ErrNotEnoughData, W+1, len(series))
	}
	per := total
	if total > m.opt.MaxWindows {
		per = max(m.opt.MaxWindows/len(series), 1)
	}

	// Normalisation over every sample that the windows use.
	var qs, dts meanVar
	for _, s := range series {
		if len(s) <= W {
			continue
		}
		start := max(len(s)-W-per, 0)
		for k := start; k < len(s); k++ {
			qs.add(s[k].Q)
			if k > 0 {
				dts.add(s[k].T - s[k-1].T)
			}
		}
	}
	m.qMean, m.qSD = qs.meanSD()
	m.dtMean, m.dtSD = dts.meanSD()

	var ex []example
	for _, s := range series {
		if len(s) <= W {
			continue
		}
		for j := max(len(s)-W-per, 0); j+W < len(s); j++ {
			x := make([]float64, W*inputs)
			m.normalise(x, s[max(j-1, 0):j+W], j > 0)
			ex = append(ex, example{x: x, target: (s[j+W].Q - m.qMean) / m.qSD})
		}
	}

	// Initial weights: uniform in ±1/√(H+2) (Keras-like scale), forget-gate
	// bias 1 (Jozefowicz et al. 2015), the rest 0.
	rng := rand.New(rand.NewPCG(m.opt.Seed, 0x15757))
	h := m.hidden
	scale := 1 / math.Sqrt(float64(h+inputs))
	for i := range m.p {
		m.p[i] = 0
	}
	for i := range m.offB() {
		m.p[i] = (2*rng.Float64() - 1) * scale
	}
	for j := range h {
		m.p[m.offB()+j] = 1
	}
	for i := m.offWy(); i < m.offBy(); i++ {
		m.p[i] = (2*rng.Float64() - 1) * scale
	}

	np := len(m.p)
	grad := make([]float64, np)
	mom, vel := make([]float64, np), make([]float64, np)
	const b1, b2, eps, clipNorm = 0.9, 0.999, 1e-8, 5.0
	w := newWork(h, W)
	order := make([]int, len(ex))
	for i := range order {
		order[i] = i
	}
	step := 0
	var loss float64
	for range m.opt.Epochs {
		for i := len(order) - 1; i > 0; i-- {
			j := rng.IntN(i + 1)
			order[i], order[j] = order[j], order[i]
		}
		loss = 0
		for lo := 0; lo < len(order); lo += m.opt.Batch {
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("selector: lstm: fit: %w", err)
			}
			batch := order[lo:min(lo+m.opt.Batch, len(order))]
			clear(grad)
			for _, e := range batch {
				copy(w.x, ex[e].x)
				d := m.forward(w) - ex[e].target
				loss += d * d
				m.backward(w, 2*d/float64(len(batch)), grad)
			}
			// Clip the global gradient norm, against the occasional
			// exploding step of backpropagation through time.
			var norm float64
			for _, g := range grad {
				norm += g * g
			}
			if norm = math.Sqrt(norm); norm > clipNorm {
				for i := range grad {
					grad[i] *= clipNorm / norm
				}
			}
			step++
			c1, c2 := 1-math.Pow(b1, float64(step)), 1-math.Pow(b2, float64(step))
			for i, g := range grad {
				mom[i] = b1*mom[i] + (1-b1)*g
				vel[i] = b2*vel[i] + (1-b2)*g*g
				m.p[i] -= m.opt.LearnRate * (mom[i] / c1) / (math.Sqrt(vel[i]/c2) + eps)
			}
		}
		loss /= float64(len(order))
	}
	m.trained = true
	return loss, nil
}

// normalise writes the model's inputs for the last Window of samples
// into x (Window × 2). When hasPrev, samples[0] is the sample before the window
// and gives the first interval; otherwise the first interval is the mean.
func (m *Model) normalise(x []float64, samples []Sample, hasPrev bool) {
	W := m.window
	win := samples[len(samples)-W:]
	for k, p := range win {
		dt := m.dtMean
		switch {
		case k > 0:
			dt = p.T - win[k-1].T
		case hasPrev && len(samples) > W:
			dt = p.T - samples[len(samples)-W-1].T
		}
		x[k*inputs] = (p.Q - m.qMean) / m.qSD
		x[k*inputs+1] = (dt - m.dtMean) / m.dtSD
	}
}

// meanVar accumulates a mean and variance (Welford).
type meanVar struct {
	n       int
	mean, s float64
}

func (v *meanVar) add(x float64) {
	v.n++
	d := x - v.mean
	v.mean += d / float64(v.n)
	v.s += d * (x - v.mean)
}

// meanSD returns the mean and the population standard deviation, 1 when it
// is 0 (a constant column then normalises to 0).
func (v *meanVar) meanSD() (float64, float64) {
	sd := 0.0
	if v.n > 0 {
		sd = math.Sqrt(v.s / float64(v.n))
	}
	if !(sd > 1e-12) {
		sd = 1
	}
	return v.mean, sd
}
