package emulator

import (
	"math"
	"strings"
	"sync"
	"time"
	"unicode"

	"fieldlink/sensors/profile"
)

// model is how one register's value moves with time. Every model is a pure
// function of the register's key (seed, slave, register name) and the time,
// built from hashed value noise, so that the value served at t can be
// recomputed at any later moment by Values and a fixed clock serves fixed
// values. Nothing in a model changes after New, so it needs no lock.
type model struct {
	kind     string  // diurnal, gust, rain, drift, walk, constant, angle
	min, max float64 // range of the value; for rain the shower intensity per hour
	spike    float64 // drift: chance per minute of a one-minute excursion towards max
	counter  bool    // rain: report the accumulated total instead of the rate
	peak     float64 // diurnal: local hour of the daily maximum
	key      uint64  // the register's own randomness
	origin   float64 // rain counter: Unix seconds at which the total is 0
	sums     *rainSums
}

// Noise salts, so that the components of one model are independent.
const (
	saltSlow uint64 = iota + 1
	saltFast
	saltDay
	saltGust
	saltTurb
	saltSeason
	saltShower
	saltSegment
	saltSpike
	saltSpikeHeight
)

// rainWindow is the period in which at most one shower falls; showers are
// drawn per window so that the rain total has a closed form.
const rainWindow = 3 * 3600.0

// rainSegment is the length of a stretch of constant intensity in a shower.
const rainSegment = 300.0

// tipBucket is the resolution of a tipping-bucket rain gauge, in mm.
const tipBucket = 0.2

// mix is SplitMix64's finaliser: a cheap hash with good avalanche.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// hashString folds s into a 64-bit hash (FNV-1a, then mixed).
func hashString(h uint64, s string) uint64 {
	h ^= 0xcbf29ce484222325
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return mix(h)
}

// u is a uniform number in [0, 1) for lattice point i of noise salt.
func (m *model) u(salt uint64, i int64) float64 {
	h := mix(mix(m.key^salt*0x9e3779b97f4a7c15) ^ uint64(i))
	return float64(h>>11) / (1 << 53)
}

// smooth is value noise in [0, 1): random at multiples of period and
// smoothly interpolated between them.
func (m *model) smooth(salt uint64, t, period float64) float64 {
	x := t / period
	i := math.Floor(x)
	f := x - i
	a, b := m.u(salt, int64(i)), m.u(salt, int64(i)+1)
	f = f * f * (3 - 2*f)
	return a + (b-a)*f
}

// fractal sums octaves of smooth noise, one per period with halving weight,
// and stretches the sum back to fill [0, 1] (sums bunch up at 0.5): a
// bounded random walk that is still a pure function of t.
func (m *model) fractal(salt uint64, t float64, periods ...float64) float64 {
	var sum, norm float64
	w := 1.0
	for k, p := range periods {
		sum += w * m.smooth(salt+uint64(k)<<32, t, p)
		norm += w
		w /= 2
	}
	v := 0.5 + (sum/norm-0.5)*1.8
	return clamp01(v)
}

func clamp01(v float64) float64 { return min(max(v, 0), 1) }

// seconds is t as fractional Unix seconds.
func seconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())*1e-9
}

// value is the model's reading at t.
func (m *model) value(t time.Time) float64 {
	s := seconds(t)
	span := m.max - m.min
	switch m.kind {
	case "constant":
		return m.min
	case "diurnal":
		// Hour of day in the clock's own location: a clock in local time
		// peaks at 15:00 local, as a field would.
		h := float64(t.Hour()) + float64(t.Minute())/60 + float64(t.Second())/3600
		c := math.Cos(2 * math.Pi * (h - m.peak) / 24)
		day := (m.smooth(saltDay, s, 3*86400) - 0.5) * 0.16 // warmer and cooler days
		wob := (m.fractal(saltFast, s, 1800, 300) - 0.5) * 0.08
		return m.min + span*clamp01(0.5+0.36*c+day+wob)
	case "gust":
		mean := 0.05 + 0.32*m.fractal(saltSlow, s, 3*3600, 2400)
		g := m.smooth(saltGust, s, 12)
		gust := g * g * g * (0.15 + 0.6*mean)
		turb := (m.smooth(saltTurb, s, 3) - 0.5) * 0.05
		return m.min + span*clamp01(mean+gust+turb)
	case "rain":
		if m.counter {
			total := m.rainTotal(s)
			return math.Floor(total/tipBucket+1e-9) * tipBucket
		}
		return m.min + span*m.rainRate(s)
	case "drift":
		base := 0.04 + 0.24*m.fractal(saltSlow, s, 2*3600, 1200, 240)
		minute := math.Floor(s / 60)
		if m.spike > 0 && m.u(saltSpike, int64(minute)) < m.spike {
			// A short excursion, highest mid-minute, as a pocket of gas
			// passing a sensor: the 8th power of a sine is above 0.6 of
			// its height for 13 s of the minute.
			top := 0.8 + 0.2*m.u(saltSpikeHeight, int64(minute))
			hump := math.Pow(math.Sin(math.Pi*(s/60-minute)), 8)
			base += (top - base) * hump
		}
		return m.min + span*clamp01(base)
	case "angle":
		// Weather turns the wind slowly (and now and then past north);
		// turbulence swings it by some tens of degrees.
		deg := 720*m.fractal(saltSlow, s, 24*3600, 6*3600) +
			50*(m.fractal(saltFast, s, 300, 60)-0.5) + 20*(m.smooth(saltTurb, s, 15)-0.5)
		if span <= 0 {
			span = 360
		}
		return m.min + math.Mod(math.Mod(deg, span)+span, span)
	default: // walk
		return m.min + span*m.fractal(saltSlow, s, 4*3600, 3600, 900, 240, 60)
	}
}

// shower describes the shower of one rain window, if any.
type shower struct {
	start, end float64 // Unix seconds
	peak       float64 // 0..1 of the intensity range
	window     int64
}

// shower draws the shower of window w. Wet and dry seasons come from slow
// noise over days, so dry spells last days and rainy weeks cluster.
func (m *model) shower(w int64) (shower, bool) {
	ws := float64(w) * rainWindow
	season := m.smooth(saltSeason, ws, 5*86400)
	wet := 0.02 + 0.3*season*season
	if m.u(saltShower, w*4) >= wet {
		return shower{}, false
	}
	dur := 600 + 4800*m.u(saltShower, w*4+1)
	start := ws + (rainWindow-dur)*m.u(saltShower, w*4+2)
	p := m.u(saltShower, w*4+3)
	return shower{start: start, end: start + dur, peak: 0.05 + 0.95*p*p*p, window: w}, true
}

// intensity is the shower's rate (0..1 of the range) in segment j.
func (m *model) intensity(sh shower, j int64) float64 {
	return sh.peak * (0.3 + 0.7*m.u(saltSegment, sh.window<<8+j))
}

// rainRate is the intensity (0..1) at s: 0 outside showers.
func (m *model) rainRate(s float64) float64 {
	sh, ok := m.shower(int64(math.Floor(s / rainWindow)))
	if !ok || s < sh.start || s >= sh.end {
		return 0
	}
	return m.intensity(sh, int64((s-sh.start)/rainSegment))
}

// rainFallen is the rain of window w up to time s, in the unit of the
// range times hours (mm when the range is mm/h).
func (m *model) rainFallen(w int64, s float64) float64 {
	sh, ok := m.shower(w)
	if !ok || s <= sh.start {
		return 0
	}
	end := min(s, sh.end)
	var sum float64
	for j := int64(0); sh.start+float64(j)*rainSegment < end; j++ {
		a := sh.start + float64(j)*rainSegment
		b := min(a+rainSegment, end)
		sum += m.intensity(sh, j) * (b - a)
	}
	return sum / 3600 * (m.max - m.min)
}

// rainTotal is the rain fallen from the origin to s. The totals of whole
// windows since the origin are kept as they are first needed, so a request
// costs a few hashes however long the emulator has run.
func (m *model) rainTotal(s float64) float64 {
	if s <= m.origin {
		return 0
	}
	w0 := int64(math.Floor(m.origin / rainWindow))
	w1 := int64(math.Floor(s / rainWindow))
	// The origin may fall inside w0's shower: leave out what fell before it.
	return m.sums.before(m, w0, w1) + m.rainFallen(w1, s) - m.rainFallen(w0, m.origin)
}

// rainSums caches a rain counter's running totals by window.
type rainSums struct {
	mu  sync.Mutex
	cum []float64 // cum[k]: rain of the whole windows w0 .. w0+k-1
}

// before returns the rain of windows w0 up to, not including, w1.
func (c *rainSums) before(m *model, w0, w1 int64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cum) == 0 {
		c.cum = append(c.cum, 0)
	}
	for k := int64(len(c.cum)); k <= w1-w0; k++ {
		w := w0 + k - 1
		c.cum = append(c.cum, c.cum[k-1]+m.rainFallen(w, float64(w+1)*rainWindow))
	}
	return c.cum[w1-w0]
}

// newModel builds the model of register r: from its emulate block, or
// inferred from its name and unit, then kept inside what the register can
// encode.
func newModel(r *profile.Register, key uint64, origin time.Time) model {
	var m model
	if e := r.Emulate; e != nil {
		m = model{kind: e.Model, min: e.Min, max: e.Max, spike: e.Spike, counter: e.Counter, peak: 15}
	} else {
		m = infer(r)
	}
	m.key = key
	m.origin = seconds(origin)
	if m.kind == "rain" && m.max <= m.min {
		m.max = m.min + 25 // a heavy shower, mm/h
	}
	if m.kind == "rain" && m.counter {
		m.sums = &rainSums{}
		return m // a total: the range is the intensity, not the value
	}
	if lo, hi, ok := encodable(r); ok && m.kind != "constant" {
		m.min = min(max(m.min, lo), hi)
		m.max = min(max(m.max, m.min), hi)
	}
	return m
}

// encodable is the range of values register r can carry on the wire.
func encodable(r *profile.Register) (lo, hi float64, ok bool) {
	var rlo, rhi float64
	switch r.Type {
	case profile.Int16:
		rlo, rhi = math.MinInt16, math.MaxInt16
	case profile.Uint16:
		rlo, rhi = 0, math.MaxUint16
	case profile.Int32:
		rlo, rhi = math.MinInt32, math.MaxInt32
	case profile.Uint32:
		rlo, rhi = 0, math.MaxUint32
	default:
		return 0, 0, false
	}
	a, b := rlo*r.ScaleOr1()+r.Offset, rhi*r.ScaleOr1()+r.Offset
	return min(a, b), max(a, b), true
}

// infer picks a model for a register without an emulate block from its
// name and unit, so that an unannotated profile still serves plausible
// readings: temperatures swing daily, wind gusts, gases drift low.
func infer(r *profile.Register) model {
	name := strings.ToLower(r.Name)
	unit := strings.ToLower(strings.TrimSpace(r.Unit))
	words := strings.FieldsFunc(r.Name, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) })
	word := func(ws ...string) bool { // a whole word of the name, any case
		for _, w := range words {
			for _, x := range ws {
				if strings.EqualFold(w, x) {
					return true
				}
			}
		}
		return false
	}
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(name, s) {
				return true
			}
		}
		return false
	}
	m := func(kind string, lo, hi float64) model {
		return model{kind: kind, min: lo, max: hi, peak: 15}
	}
	switch {
	case r.Type == profile.String:
		return m("constant", 0, 0)
	case r.Type == profile.Bool:
		if word("ok", "run", "running", "on") || has("ready", "online", "enable", "power") {
			return m("constant", 1, 1)
		}
		return m("constant", 0, 0)
	case has("rain", "precip"):
		c := m("rain", 0, 25)
		// A reading in mm (not mm/h) is an amount: a gauge's total.
		c.counter = has("total", "accum", "sum", "count", "cumul", "daily") || unit == "mm"
		return c
	case has("winddir", "wind_dir", "direction", "heading") || unit == "°" || unit == "deg":
		return m("angle", 0, 360)
	case has("wind", "gust") || unit == "m/s" || unit == "km/h":
		if unit == "km/h" {
			return m("gust", 0, 70)
		}
		return m("gust", 0, 20)
	case has("humid") || unit == "%rh":
		c := m("diurnal", 35, 95)
		c.peak = 4 // air is dampest before dawn
		return c
	case has("temp") || unit == "°c" || unit == "c" || unit == "degc":
		return m("diurnal", 5, 30)
	case has("ch4", "methane"):
		c := m("drift", 0, 2) // %; alarms at 1 %
		c.spike = 0.002
		return c
	case has("co2"):
		return m("walk", 400, 1500)
	case word("co") || has("carbonmonoxide", "carbon_monoxide", "monoxide"):
		c := m("drift", 0, 50) // ppm; alarms at 24 ppm
		c.spike = 0.002
		return c
	case has("h2s"):
		c := m("drift", 0, 20)
		c.spike = 0.001
		return c
	case word("o2") || has("oxygen"):
		return m("walk", 20.3, 20.9)
	case has("press") || unit == "hpa" || unit == "mbar":
		if unit == "kpa" {
			return m("walk", 99, 103)
		}
		return m("walk", 990, 1030)
	case has("volt", "batt") && unit == "v":
		return m("walk", 12, 13.8)
	case has("lux", "illum", "light", "solar", "radiation"):
		c := m("diurnal", 0, 60000)
		c.peak = 13
		return c
	case has("moist", "soil"):
		return m("walk", 15, 45)
	case has("pm2", "pm10", "dust"):
		return m("walk", 5, 80)
	}
	return m("walk", 0, 100)
}
