// Package lstm is the irlb selector's predictor: a one-layer LSTM that
// predicts an upstream's next reported connection count from its last few
// reports (docs/algorithms.md § 003). Training ([Model.Fit]) is offline
// numerics, run by the daemon from a goroutine it owns; the strategy's
// recomputation predicts with a [Predictor], which does not allocate.
package lstm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// ErrNotEnoughData is returned by [Model.Fit] (and the irlb strategy's Train) when the
// series hold no complete training window: Window + 1 points of one series.
var ErrNotEnoughData = errors.New("selector: lstm: not enough data to train")

// ErrBadModel is returned, wrapped with the reason, by
// [Model.UnmarshalBinary] for data that is not a model it wrote, and by
// the irlb strategy's SetModel for a model it cannot use.
var ErrBadModel = errors.New("selector: lstm: bad model")

// Options configures a [Model] and its training. The zero value is the
// default; every field says what its zero value means.
type Options struct {
	// Hidden is the number of LSTM units. Default 16.
	Hidden int
	// Window is how many past samples the model reads to predict the next.
	// Default 12.
	Window int
	// Epochs is how many passes [Model.Fit] makes over the training windows.
	// Default 100. (The paper trains for 500 epochs, once, offline; Fit is
	// meant to be re-run on fresh history, from a goroutine the caller owns.)
	Epochs int
	// Batch is the minibatch size. Default 48, the paper's.
	Batch int
	// LearnRate is Adam's step size α. Default 0.005. Adam's other
	// constants are Kingma and Ba's: β1 = 0.9, β2 = 0.999, ε = 1e-8.
	LearnRate float64
	// MaxWindows bounds the training set, and so the cost of Fit: at most
	// this many windows, the most recent of each series. Default 4096.
	MaxWindows int
	// Seed seeds the initial weights and the minibatch order. Default 0 is
	// a fixed seed like any other: training is deterministic.
	Seed uint64
}

// Point is one sample of a series: at time T (seconds, any origin), the
// value Q (for IRLB, an upstream's reported connection count).
type Point struct {
	T, Q float64
}

// Model is a one-layer LSTM with a dense output, predicting the next value
// of a series from its last Window samples, as IRLB uses it (docs/algorithms.md § 003,
// section 2.1): the input at each step is the pair (q, t) of the paper's
// X = [Q, T], Z-score normalised. **Reading**: the time column is the
// interval since the previous sample, Δt, not the absolute time, which
// never repeats and which a trained network cannot use beyond its training
// range; with regular sampling it is constant and carries nothing.
//
// For one window x_1…x_W (x_k = (z(q_k), z(Δt_k))), a_0 = c_0 = 0 and, with
// [a, x] the concatenation and σ the logistic function:
//
//	Γf = σ(Wf·[a_{k−1}, x_k] + bf)     forget gate
//	Γu = σ(Wu·[a_{k−1}, x_k] + bu)     update (input) gate
//	c̃  = tanh(Wc·[a_{k−1}, x_k] + bc)  candidate
//	Γo = σ(Wo·[a_{k−1}, x_k] + bo)     output gate
//	c_k = Γf⊙c_{k−1} + Γu⊙c̃
//	a_k = Γo⊙tanh(c_k)
//	ŷ  = Wy·a_W + by                  dense output, z(q_{W+1})
//
// Training ([Model.Fit]) minimises the mean squared error of ŷ against the
// normalised next value over minibatches, by backpropagation through time
// and Adam, as the paper does. The paper's Z-score divides by "S, the
// variance"; this divides by the standard deviation, as a Z-score does.
//
// A trained Model is safe for concurrent [Model.Predict]. Fit and
// UnmarshalBinary change it and must not run concurrently with anything
// else on it. MarshalBinary keeps what predictions need: sizes,
// normalisation and weights.
type Model struct {
	hidden, window int
	opt            Options

	// Z-score normalisation of q and Δt, fitted on the training series.
	qMean, qSD, dtMean, dtSD float64

	// p holds every parameter: W (4H × (H+2), rows f, u, c̃, o), b (4H),
	// Wy (H), by (1).
	p       []float64
	trained bool
}

// inputs is the number of inputs per step: q and Δt.
const inputs = 2

// New returns an untrained model; [Model.Fit] trains it.
func New(opt Options) *Model {
	opt = opt.WithDefaults()
	m := &Model{hidden: opt.Hidden, window: opt.Window, opt: opt, qSD: 1, dtSD: 1}
	m.p = make([]float64, params(m.hidden))
	return m
}

// WithDefaults returns opt with the defaults in its zero fields.
func (opt Options) WithDefaults() Options {
	if opt.Hidden <= 0 {
		opt.Hidden = 16
	}
	if opt.Window <= 0 {
		opt.Window = 12
	}
	if opt.Epochs <= 0 {
		opt.Epochs = 100
	}
	if opt.Batch <= 0 {
		opt.Batch = 48
	}
	if opt.LearnRate <= 0 {
		opt.LearnRate = 0.005
	}
	if opt.MaxWindows <= 0 {
		opt.MaxWindows = 4096
	}
	return opt
}

// Window is the number of samples a prediction reads.
func (m *Model) Window() int { return m.window }

// Trained reports whether the model was trained by Fit or loaded by
// UnmarshalBinary.
func (m *Model) Trained() bool { return m.trained }

// params is the number of parameters of a model of h units.
func params(h int) int { return 4*h*(h+inputs) + 4*h + h + 1 }

// Parameter offsets in p.
func (m *Model) offB() int  { return 4 * m.hidden * (m.hidden + inputs) }
func (m *Model) offWy() int { return m.offB() + 4*m.hidden }
func (m *Model) offBy() int { return m.offWy() + m.hidden }

// work is the state of one forward pass, kept for the backward pass.
type work struct {
	steps int
	x     []float64 // steps × 2 inputs
	z     []float64 // steps × (H+2): [a_{k−1}, x_k]
	gate  []float64 // steps × 4H, activated: Γf, Γu, c̃, Γo
	c     []float64 // (steps+1) × H; c[0] = 0
	a     []float64 // (steps+1) × H; a[0] = 0
	// backward scratch
	da, dc, dg, dz []float64
}

func newWork(h, steps int) *work {
	n := h + inputs
	return &work{
		steps: steps,
		x:     make([]float64, steps*inputs),
		z:     make([]float64, steps*n),
		gate:  make([]float64, steps*4*h),
		c:     make([]float64, (steps+1)*h),
		a:     make([]float64, (steps+1)*h),
		da:    make([]float64, h),
		dc:    make([]float64, h),
		dg:    make([]float64, 4*h),
		dz:    make([]float64, n),
	}
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// forward runs the network over w.x (already normalised) and returns ŷ.
func (m *Model) forward(w *work) float64 {
	h, n := m.hidden, m.hidden+inputs
	W, b := m.p[:m.offB()], m.p[m.offB():m.offWy()]
	for k := range w.steps {
		z := w.z[k*n : (k+1)*n]
		copy(z[:h], w.a[k*h:(k+1)*h])
		copy(z[h:], w.x[k*inputs:(k+1)*inputs])
		g := w.gate[k*4*h : (k+1)*4*h]
		for r := range 4 * h {
			row := W[r*n : (r+1)*n]
			s := b[r]
			for j, zj := range z {
				s += row[j] * zj
			}
			if r >= 2*h && r < 3*h {
				g[r] = math.Tanh(s)
			} else {
				g[r] = sigmoid(s)
			}
		}
		cPrev, c, a := w.c[k*h:(k+1)*h], w.c[(k+1)*h:(k+2)*h], w.a[(k+1)*h:(k+2)*h]
		for j := range h {
			c[j] = g[j]*cPrev[j] + g[h+j]*g[2*h+j]
			a[j] = g[3*h+j] * math.Tanh(c[j])
		}
	}
	y := m.p[m.offBy()]
	aW := w.a[w.steps*h : (w.steps+1)*h]
	for j, wy := range m.p[m.offWy():m.offBy()] {
		y += wy * aW[j]
	}
	return y
}

// backward adds to grad the gradient of the loss with respect to every
// parameter, given dy = ∂loss/∂ŷ, for the pass forward left in w.
func (m *Model) backward(w *work, dy float64, grad []float64) {
	h, n := m.hidden, m.hidden+inputs
	W := m.p[:m.offB()]
	gW, gb := grad[:m.offB()], grad[m.offB():m.offWy()]
	gWy := grad[m.offWy():m.offBy()]
	grad[m.offBy()] += dy
	aW := w.a[w.steps*h : (w.steps+1)*h]
	for j, wy := range m.p[m.offWy():m.offBy()] {
		gWy[j] += dy * aW[j]
		w.da[j] = dy * wy
		w.dc[j] = 0
	}
	for k := w.steps - 1; k >= 0; k-- {
		g := w.gate[k*4*h : (k+1)*4*h]
		cPrev, c := w.c[k*h:(k+1)*h], w.c[(k+1)*h:(k+2)*h]
		for j := range h {
			tc := math.Tanh(c[j])
			f, u, cc, o := g[j], g[h+j], g[2*h+j], g[3*h+j]
			dc := w.dc[j] + w.da[j]*o*(1-tc*tc)
			w.dg[j] = dc * cPrev[j] * f * (1 - f)    // forget gate pre-activation
			w.dg[h+j] = dc * cc * u * (1 - u)        // update gate
			w.dg[2*h+j] = dc * u * (1 - cc*cc)       // candidate
			w.dg[3*h+j] = w.da[j] * tc * o * (1 - o) // output gate
			w.dc[j] = dc * f                         // to c_{k−1}
		}
		z := w.z[k*n : (k+1)*n]
		clear(w.dz)
		for r, dg := range w.dg {
			if dg == 0 {
				continue
			}
			gb[r] += dg
			row, grow := W[r*n:(r+1)*n], gW[r*n:(r+1)*n]
			for j, zj := range z {
				grow[j] += dg * zj
				w.dz[j] += dg * row[j]
			}
		}
		copy(w.da, w.dz[:h])
	}
}

// example is one training window: inputs start at x[off] for window
// steps, and the normalised target.
type example struct {
	x      []float64 // window × 2, normalised
	target float64
}

// Fit trains the model from scratch on the series, and returns the mean
// squared error of the last epoch, in normalised units. Each series is one
// sequence of samples in time order (IRLB: one per upstream); every
// Window + 1 consecutive points of a series make a training window, the
// most recent MaxWindows windows in all. The Z-score normalisation is
// fitted on the same points. Fit checks ctx between minibatches; on an
// error the model is left untrained.
//
// The cost is Epochs × windows × Window steps of about 24·H·(H+2)
// floating-point operations each (H = Hidden).
func (m *Model) Fit(ctx context.Context, series ...[]Point) (float64, error) {
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

	// Normalisation over every point that the windows use.
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

// normalise writes the model's inputs for the last Window points of pts
// into x (Window × 2). When hasPrev, pts[0] is the point before the window
// and gives the first interval; otherwise the first interval is the mean.
func (m *Model) normalise(x []float64, pts []Point, hasPrev bool) {
	W := m.window
	win := pts[len(pts)-W:]
	for k, p := range win {
		dt := m.dtMean
		switch {
		case k > 0:
			dt = p.T - win[k-1].T
		case hasPrev && len(pts) > W:
			dt = p.T - pts[len(pts)-W-1].T
		}
		x[k*inputs] = (p.Q - m.qMean) / m.qSD
		x[k*inputs+1] = (dt - m.dtMean) / m.dtSD
	}
}

// Predict returns the predicted next value of the series whose latest
// points are pts, in time order. It reads the last Window points (and the
// one before them, when given, for the first interval). With fewer points
// than Window, or when the model is untrained, it returns the last value
// (0 for no points): persistence, the baseline the model must beat.
func (m *Model) Predict(pts []Point) float64 {
	if len(pts) == 0 {
		return 0
	}
	if !m.trained || len(pts) < m.window {
		return pts[len(pts)-1].Q
	}
	return m.predict(newWork(m.hidden, m.window), pts)
}

// Predictor predicts with one model and a workspace of its own, so that a
// prediction does not allocate. It is not safe for concurrent use: its owner
// serialises it (irlb's recomputation, under its lock).
type Predictor struct {
	m *Model
	w *work
}

// Predictor returns a predictor over m; m is not to be changed while it is
// in use.
func (m *Model) Predictor() *Predictor {
	return &Predictor{m: m, w: newWork(m.hidden, m.window)}
}

// Model is the model p predicts with.
func (p *Predictor) Model() *Model { return p.m }

// Predict is [Model.Predict] in p's workspace.
func (p *Predictor) Predict(pts []Point) float64 {
	if len(pts) == 0 {
		return 0
	}
	if !p.m.trained || len(pts) < p.m.window {
		return pts[len(pts)-1].Q
	}
	return p.m.predict(p.w, pts)
}

// predict is Predict with a caller-owned workspace, for a trained model and
// at least Window points.
func (m *Model) predict(w *work, pts []Point) float64 {
	if len(pts) > m.window+1 {
		pts = pts[len(pts)-m.window-1:]
	}
	m.normalise(w.x, pts, len(pts) > m.window)
	return m.forward(w)*m.qSD + m.qMean
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

// magic starts a marshalled model; the last byte is the format version.
const magic = "FLLSTM\x00\x01"

// MarshalBinary encodes the model: magic and version, Hidden and Window
// (uint32), the four normalisation constants and every weight (float64),
// little-endian. It is for keeping a trained model (the gateway keeps it
// in its bbolt file) and loading it with UnmarshalBinary; the training
// options are not kept.
func (m *Model) MarshalBinary() ([]byte, error) {
	if !m.trained {
		return nil, fmt.Errorf("%w: not trained", ErrBadModel)
	}
	b := make([]byte, 0, len(magic)+8+8*(4+len(m.p)))
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.hidden))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.window))
	for _, f := range [...]float64{m.qMean, m.qSD, m.dtMean, m.dtSD} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	for _, f := range m.p {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return b, nil
}

// UnmarshalBinary replaces the model with one MarshalBinary encoded. It
// rejects, with [ErrBadModel], data of another format or version, of
// the wrong length, or with a weight that is not finite.
func (m *Model) UnmarshalBinary(data []byte) error {
	if len(data) < len(magic)+8+32 || string(data[:len(magic)]) != magic {
		return fmt.Errorf("%w: not an lstm model of format %d", ErrBadModel, magic[len(magic)-1])
	}
	d := data[len(magic):]
	h, win := binary.LittleEndian.Uint32(d), binary.LittleEndian.Uint32(d[4:])
	if h == 0 || h > 1024 || win == 0 || win > 1<<16 {
		return fmt.Errorf("%w: hidden %d, window %d", ErrBadModel, h, win)
	}
	d = d[8:]
	np := params(int(h))
	if len(d) != 8*(4+np) {
		return fmt.Errorf("%w: %d bytes of weights for %d units, want %d", ErrBadModel, len(d), h, 8*(4+np))
	}
	f := make([]float64, 4+np)
	for i := range f {
		f[i] = math.Float64frombits(binary.LittleEndian.Uint64(d[8*i:]))
		if math.IsNaN(f[i]) || math.IsInf(f[i], 0) {
			return fmt.Errorf("%w: value %d is %v", ErrBadModel, i, f[i])
		}
	}
	if f[1] <= 0 || f[3] <= 0 {
		return fmt.Errorf("%w: standard deviation ≤ 0", ErrBadModel)
	}
	m.hidden, m.window = int(h), int(win)
	m.opt.Hidden, m.opt.Window = m.hidden, m.window
	m.qMean, m.qSD, m.dtMean, m.dtSD = f[0], f[1], f[2], f[3]
	m.p = f[4:]
	m.trained = true
	return nil
}
