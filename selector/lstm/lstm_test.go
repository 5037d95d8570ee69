package lstm

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestLSTMGradient checks the backward pass against central finite
// differences of the squared error, for every parameter of a small model.
func TestLSTMGradient(t *testing.T) {
	m := New(Options{Hidden: 3, Window: 5})
	r := rand.New(rand.NewPCG(3, 4))
	for i := range m.p {
		m.p[i] = r.NormFloat64() * 0.7
	}
	w := newWork(m.hidden, m.window)
	for i := range w.x {
		w.x[i] = r.NormFloat64()
	}
	const target = 0.3
	loss := func() float64 {
		d := m.forward(w) - target
		return d * d
	}
	grad := make([]float64, len(m.p))
	m.backward(w, 2*(m.forward(w)-target), grad)
	const h = 1e-6
	var worst float64
	for i := range m.p {
		orig := m.p[i]
		m.p[i] = orig + h
		up := loss()
		m.p[i] = orig - h
		down := loss()
		m.p[i] = orig
		num := (up - down) / (2 * h)
		rel := math.Abs(num-grad[i]) / math.Max(1e-6, math.Abs(num)+math.Abs(grad[i]))
		worst = math.Max(worst, rel)
		if rel > 1e-5 {
			t.Errorf("parameter %d of %d: backward %.9g, finite difference %.9g", i, len(m.p), grad[i], num)
		}
	}
	t.Logf("%d parameters, worst relative error %.2g", len(m.p), worst)
}

// lstmSine is q_k = 100 + 50·sin(2πk/24) + N(0, 3²), one sample a
// second: a periodic connection count with noise.
func lstmSine(n int, seed uint64) []Sample {
	r := rand.New(rand.NewPCG(seed, 1))
	samples := make([]Sample, n)
	for k := range samples {
		samples[k] = Sample{T: float64(k), Q: 100 + 50*math.Sin(2*math.Pi*float64(k)/24) + 3*r.NormFloat64()}
	}
	return samples
}

// lstmTestOptions are small enough to train in well under a second.
var lstmTestOptions = Options{Hidden: 6, Window: 12, Epochs: 15, Batch: 48, LearnRate: 0.02, Seed: 7}

// lstmTestMSE returns the mean squared error, in connections², of the
// model's one-step predictions over samples[from:] and of last-value
// prediction, from the history before each sample.
func lstmTestMSE(m *Model, samples []Sample, from int) (model, last float64) {
	n := 0
	for k := from; k < len(samples); k++ {
		p := m.Predict(samples[:k])
		d := p - samples[k].Q
		model += d * d
		d = samples[k-1].Q - samples[k].Q
		last += d * d
		n++
	}
	return model / float64(n), last / float64(n)
}

// TestLSTMLearnsPeriodicSeries trains on the first half of a noisy sine
// (the paper's 50% split) and tests one-step predictions on the second
// half against last-value prediction. The noise alone gives an MSE of 9;
// last-value prediction about 2·9 + 50²·(1 − cos(2π/24)) ≈ 103.
func TestLSTMLearnsPeriodicSeries(t *testing.T) {
	samples := lstmSine(480, 11)
	m := New(lstmTestOptions)
	loss, err := m.Fit(context.Background(), samples[:240])
	if err != nil {
		t.Fatal(err)
	}
	model, last := lstmTestMSE(m, samples, 240)
	t.Logf("training loss %.4f (normalised); test MSE: LSTM %.2f, last value %.2f (noise floor 9)", loss, model, last)
	if model > last/3 {
		t.Fatalf("LSTM test MSE %.2f is not clearly below last-value %.2f", model, last)
	}
}

func TestLSTMDeterministicAndRoundTrip(t *testing.T) {
	samples := lstmSine(200, 5)
	opt := lstmTestOptions
	opt.Epochs = 5
	a, b := New(opt), New(opt)
	la, err := a.Fit(context.Background(), samples)
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := b.Fit(context.Background(), samples)
	da, _ := a.MarshalBinary()
	db, _ := b.MarshalBinary()
	if la != lb || !bytes.Equal(da, db) {
		t.Fatalf("two fits with one seed differ: loss %v and %v", la, lb)
	}

	var c Model
	if err := c.UnmarshalBinary(da); err != nil {
		t.Fatal(err)
	}
	if !c.Trained() || c.Window() != opt.Window {
		t.Fatalf("unmarshalled: trained %v, window %d", c.Trained(), c.Window())
	}
	for k := 20; k < len(samples); k += 7 {
		if pa, pc := a.Predict(samples[:k]), c.Predict(samples[:k]); pa != pc {
			t.Fatalf("prediction at %d: %v before marshalling, %v after", k, pa, pc)
		}
	}
	dc, _ := c.MarshalBinary()
	if !bytes.Equal(da, dc) {
		t.Fatal("marshal, unmarshal, marshal changed the bytes")
	}

	for _, bad := range [][]byte{nil, da[:len(da)-1], append(bytes.Clone(da), 0), []byte("FLLSTM\x00\x02" + string(da[8:]))} {
		if err := new(Model).UnmarshalBinary(bad); !errors.Is(err, ErrBadModel) {
			t.Errorf("UnmarshalBinary of %d bad bytes: %v", len(bad), err)
		}
	}
	nan := bytes.Clone(da)
	copy(nan[len(nan)-8:], []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
	if err := new(Model).UnmarshalBinary(nan); !errors.Is(err, ErrBadModel) {
		t.Errorf("UnmarshalBinary with a NaN weight: %v", err)
	}
	if _, err := New(opt).MarshalBinary(); !errors.Is(err, ErrBadModel) {
		t.Errorf("MarshalBinary of an untrained model: %v", err)
	}
}

func TestLSTMFitErrors(t *testing.T) {
	m := New(Options{Window: 12})
	if _, err := m.Fit(context.Background(), lstmSine(12, 1)); !errors.Is(err, ErrNotEnoughData) {
		t.Fatalf("Fit on 12 samples, window 12: %v", err)
	}
	if got := m.Predict(lstmSine(30, 1)[:5]); got != lstmSine(30, 1)[4].Q {
		t.Fatalf("untrained Predict = %v, want the last value", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Fit(ctx, lstmSine(100, 1)); !errors.Is(err, context.Canceled) || m.Trained() {
		t.Fatalf("Fit with a canceled context: %v, trained %v", err, m.Trained())
	}
	var z Model // the zero Model trains with the defaults
	opt := Options{Epochs: 1}
	z.opt = opt
	if _, err := z.Fit(context.Background(), lstmSine(60, 1)); err != nil || z.Window() != 12 {
		t.Fatalf("zero Model: %v, window %d", err, z.Window())
	}
}

// TestPredictorAgreesWithPredict checks that a Predictor predicts what the
// model does, falls back to the last value like it, and does not allocate.
func TestPredictorAgreesWithPredict(t *testing.T) {
	samples := lstmSine(120, 3)
	opt := lstmTestOptions
	opt.Epochs = 3
	m := New(opt)
	p := m.Predictor()
	if got := p.Predict(samples[:20]); got != samples[19].Q {
		t.Fatalf("untrained: predicted %v, want the last value %v", got, samples[19].Q)
	}
	if _, err := m.Fit(context.Background(), samples); err != nil {
		t.Fatal(err)
	}
	if p.Model() != m {
		t.Fatal("Model is not the predictor's model")
	}
	if got := p.Predict(samples[:opt.Window-1]); got != samples[opt.Window-2].Q {
		t.Fatalf("short history: predicted %v, want the last value %v", got, samples[opt.Window-2].Q)
	}
	if got := p.Predict(nil); got != 0 {
		t.Fatalf("no samples: predicted %v, want 0", got)
	}
	for k := opt.Window; k < len(samples); k += 5 {
		if a, b := m.Predict(samples[:k]), p.Predict(samples[:k]); a != b {
			t.Fatalf("at %d: Model.Predict %v, Predictor.Predict %v", k, a, b)
		}
	}
	if a := testing.AllocsPerRun(10, func() { p.Predict(samples[:60]) }); a != 0 {
		t.Fatalf("Predictor.Predict allocates %v times", a)
	}
}
