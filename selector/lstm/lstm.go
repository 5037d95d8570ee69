// Package lstm is the irlb selector's predictor: a one-layer LSTM that
// predicts an upstream's next reported connection count from its last few
// reports (docs/algorithms.md § 003). Training ([Model.Fit]) is offline
// numerics, run by the daemon from a goroutine it owns; the strategy's
// recomputation predicts with a [Predictor], which does not allocate.
package lstm

import (
	"errors"
)

// ErrNotEnoughData is returned by [Model.Fit] (and the irlb strategy's Train) when the
// series hold no complete training window: Window + 1 samples of one series.
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

// Sample is one value of a series: at time T (seconds, any origin), the
// value Q (for IRLB, an upstream's reported connection count).
type Sample struct {
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

// Predict returns the predicted next value of the series whose latest
// samples are given in time order. It reads the last Window samples (and the
// one before them, when given, for the first interval). With fewer samples
// than Window, or when the model is untrained, it returns the last value
// (0 for no samples): persistence, the baseline the model must beat.
func (m *Model) Predict(samples []Sample) float64 {
	if len(samples) == 0 {
		return 0
	}
	if !m.trained || len(samples) < m.window {
		return samples[len(samples)-1].Q
	}
	return m.predict(newWork(m.hidden, m.window), samples)
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
func (p *Predictor) Predict(samples []Sample) float64 {
	if len(samples) == 0 {
		return 0
	}
	if !p.m.trained || len(samples) < p.m.window {
		return samples[len(samples)-1].Q
	}
	return p.m.predict(p.w, samples)
}

// predict is Predict with a caller-owned workspace, for a trained model and
// at least Window samples.
func (m *Model) predict(w *work, samples []Sample) float64 {
	if len(samples) > m.window+1 {
		samples = samples[len(samples)-m.window-1:]
	}
	m.normalise(w.x, samples, len(samples) > m.window)
	return m.forward(w)*m.qSD + m.qMean
}
