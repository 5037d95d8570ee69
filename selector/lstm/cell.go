package lstm

import (
	"math"
)

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
