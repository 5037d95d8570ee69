package lab

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Estimate is a mean over seeds with its bootstrap 95% confidence interval.
type Estimate struct {
	Mean, Lo, Hi float64
}

// bootstrapResamples is how many resamples [Bootstrap] draws.
const bootstrapResamples = 2000

// Bootstrap returns the mean of xs and a percentile-bootstrap 95%
// confidence interval for it, from a fixed stream so that the same xs give
// the same interval. NaNs are left out; with none left the estimate is NaN.
func Bootstrap(xs []float64) Estimate {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Estimate{math.NaN(), math.NaN(), math.NaN()}
	}
	mean := meanOf(v)
	if len(v) == 1 {
		return Estimate{mean, mean, mean}
	}
	r := rand.New(rand.NewPCG(0x1ab, uint64(len(v))))
	means := make([]float64, bootstrapResamples)
	for k := range means {
		var s float64
		for range v {
			s += v[r.IntN(len(v))]
		}
		means[k] = s / float64(len(v))
	}
	slices.Sort(means)
	lo := means[int(0.025*float64(len(means)))]
	hi := means[int(math.Ceil(0.975*float64(len(means))))-1]
	return Estimate{Mean: mean, Lo: min(lo, mean), Hi: max(hi, mean)}
}

func meanOf(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
