package emulator

import (
	"math"
	"testing"
	"time"
)

var day0 = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)

func testModel(kind string, lo, hi float64) model {
	return model{kind: kind, min: lo, max: hi, peak: 15, key: hashString(42, kind), origin: seconds(day0), sums: &rainSums{}}
}

// TestDiurnal: over a month the afternoon is warmest and the small hours
// coldest, and values stay in range.
func TestDiurnal(t *testing.T) {
	m := testModel("diurnal", -5, 35)
	var sum [24]float64
	for d := range 30 {
		for h := range 24 {
			for q := range 4 {
				v := m.value(day0.Add(time.Duration(d)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(q)*15*time.Minute))
				if v < -5 || v > 35 {
					t.Fatalf("day %d %02d:%02d: %v outside -5..35", d, h, q*15, v)
				}
				sum[h] += v
			}
		}
	}
	hot, cold := 0, 0
	for h := range 24 {
		if sum[h] > sum[hot] {
			hot = h
		}
		if sum[h] < sum[cold] {
			cold = h
		}
	}
	if hot < 13 || hot > 17 {
		t.Errorf("warmest hour %02d, want the afternoon (13..17)", hot)
	}
	if cold > 5 {
		t.Errorf("coldest hour %02d, want the small hours (0..5)", cold)
	}
	if swing := (sum[hot] - sum[cold]) / 120; swing < 20 {
		t.Errorf("mean daily swing %.1f, want most of the 40 range", swing)
	}
	// The hour is the clock's own: at 15:00 in UTC+8 it is afternoon there.
	cst := time.FixedZone("CST", 8*3600)
	at := time.Date(2025, 3, 3, 15, 0, 0, 0, cst)
	if m.value(at) <= m.value(at.Add(12*time.Hour)) {
		t.Errorf("15:00 CST (%v) not warmer than 03:00 CST (%v)", m.value(at), m.value(at.Add(12*time.Hour)))
	}
}

// TestDrift: a gas reading stays low inside its range and spikes towards
// max at the requested chance per minute.
func TestDrift(t *testing.T) {
	const minutes = 20000
	for _, spike := range []float64{0, 0.01, 0.05} {
		m := testModel("drift", 0, 2)
		m.spike = spike
		n := 0
		for k := range minutes {
			at := day0.Add(time.Duration(k)*time.Minute + 30*time.Second) // mid-minute: a spike's top
			v := m.value(at)
			if v < 0 || v > 2 {
				t.Fatalf("spike %v: %v outside 0..2", spike, v)
			}
			if v >= 1 { // a CH4 alarm
				n++
			}
			if q := m.value(at.Add(-29 * time.Second)); v < 1 && q >= 1 {
				t.Fatalf("spike %v: alarm at the start of a minute without a spike in it", spike)
			}
		}
		want := spike * minutes
		if spike == 0 && n != 0 {
			t.Errorf("spike 0: %d alarms", n)
		}
		// Binomial: 4 standard deviations.
		if sd := math.Sqrt(minutes * spike * (1 - spike)); math.Abs(float64(n)-want) > 4*sd {
			t.Errorf("spike %v: %d alarm minutes in %d, want %.0f ± %.0f", spike, n, minutes, want, 4*sd)
		}
	}
}

// TestRain: a rate model rains some of the time and is 0 otherwise; a
// counter only grows, in 0.2 mm steps, by a plausible amount.
func TestRain(t *testing.T) {
	rate := testModel("rain", 0, 30)
	wet, n := 0, 0
	for s := time.Duration(0); s < 60*24*time.Hour; s += time.Minute {
		v := rate.value(day0.Add(s))
		if v < 0 || v > 30 {
			t.Fatalf("rate %v outside 0..30", v)
		}
		if v > 0 {
			wet++
		}
		n++
	}
	if share := float64(wet) / float64(n); share < 0.01 || share > 0.3 {
		t.Errorf("raining %.1f%% of the time, want dry spells and showers", 100*share)
	}

	ctr := rate
	ctr.counter = true
	last := 0.0
	for s := time.Duration(0); s < 60*24*time.Hour; s += 5 * time.Minute {
		v := ctr.value(day0.Add(s))
		if v < last {
			t.Fatalf("counter fell from %v to %v at %v", last, v, s)
		}
		if steps := v / tipBucket; math.Abs(steps-math.Round(steps)) > 1e-6 {
			t.Fatalf("counter %v is not a multiple of 0.2", v)
		}
		last = v
	}
	t.Logf("rain: %.1f%% of minutes wet, %.1f mm in 60 days", 100*float64(wet)/float64(n), last)
	if last < 10 || last > 800 {
		t.Errorf("%.1f mm in 60 days, want a plausible total", last)
	}
	// The counter grows exactly by the integral of the rate: compare with a
	// numerical integration over a week.
	var sum float64
	const step = 10.0 // seconds
	t0 := seconds(day0)
	for s := 0.0; s < 7*86400; s += step {
		sum += rate.rainRate(t0+s+step/2) * 30 * step / 3600
	}
	if got := ctr.rainTotal(t0 + 7*86400); math.Abs(got-sum) > 0.01*sum+0.1 {
		t.Errorf("counter total %v mm, integrated rate %v mm", got, sum)
	}
	if v := ctr.value(day0.Add(-time.Hour)); v != 0 {
		t.Errorf("counter before its origin: %v", v)
	}
}

func TestGustAndAngle(t *testing.T) {
	g := testModel("gust", 0, 25)
	var sum, top float64
	n := 0
	for s := time.Duration(0); s < 3*24*time.Hour; s += 10 * time.Second {
		v := g.value(day0.Add(s))
		if v < 0 || v > 25 {
			t.Fatalf("wind %v outside 0..25", v)
		}
		sum += v
		top = max(top, v)
		n++
	}
	t.Logf("wind over 3 days: mean %.1f, top %.1f m/s", sum/float64(n), top)
	if mean := sum / float64(n); mean < 2 || mean > 12 || top < mean+5 {
		t.Errorf("wind mean %.1f, top %.1f: want a moderate mean with gusts well above it", mean, top)
	}

	a := testModel("angle", 0, 360)
	wraps := 0
	prev := a.value(day0)
	for s := time.Duration(0); s < 30*24*time.Hour; s += time.Minute {
		v := a.value(day0.Add(s))
		if v < 0 || v >= 360 {
			t.Fatalf("angle %v outside [0, 360)", v)
		}
		if math.Abs(v-prev) > 180 {
			wraps++
		}
		prev = v
	}
	t.Logf("direction crossed north %d times in 30 days", wraps)
	if wraps == 0 {
		t.Error("the direction never crossed north in 30 days")
	}
}

// TestDeterminism: the same seed and clock give the same values in two
// emulators; another seed or another time gives others.
func TestDeterminism(t *testing.T) {
	p := parse(t, "weather", weatherYAML)
	mk := func(seed int64) *Emulator {
		return newEmu(t, []Device{{Slave: 1, Profile: p}, {Slave: 2, Profile: p}}, Options{Seed: seed})
	}
	a, b, c := mk(1), mk(1), mk(2)
	for _, at := range []time.Time{fixedNow, fixedNow.Add(37 * time.Minute), fixedNow.Add(100 * 24 * time.Hour)} {
		va, vb := a.Values(1, at), b.Values(1, at)
		for k, v := range va {
			if vb[k] != v {
				t.Errorf("%v %s: %v and %v with the same seed", at, k, v, vb[k])
			}
		}
	}
	differ := func(x, y map[string]float64) bool {
		for _, k := range []string{"Temperature", "WindSpeed", "Pressure", "WindDirection"} {
			if x[k] != y[k] {
				return true
			}
		}
		return false
	}
	if !differ(a.Values(1, fixedNow), c.Values(1, fixedNow)) {
		t.Error("seeds 1 and 2 give the same values")
	}
	if !differ(a.Values(1, fixedNow), a.Values(2, fixedNow)) {
		t.Error("slaves 1 and 2 give the same values")
	}
	if !differ(a.Values(1, fixedNow), a.Values(1, fixedNow.Add(10*time.Minute))) {
		t.Error("values do not change in 10 minutes")
	}
	if a.Values(9, fixedNow) != nil {
		t.Error("Values of a slave not emulated is not nil")
	}
}

// TestInfer: registers without an emulate block get a model that fits
// their name and unit, within what the register can encode.
func TestInfer(t *testing.T) {
	p := parse(t, "plain", `
model: PLAIN
data_type: test
registers:
  - {name: AirTemperature, area: input, address: 0, type: int16, scale: 0.1, unit: "°C"}
  - {name: RelativeHumidity, area: input, address: 1, scale: 0.1, unit: "%RH"}
  - {name: WindSpeed, area: input, address: 2, scale: 0.1, unit: m/s}
  - {name: WindDirection, area: input, address: 3, unit: "°"}
  - {name: Rainfall, area: input, address: 4, scale: 0.2, unit: mm}
  - {name: CH4, area: input, address: 5, scale: 0.01, unit: "%"}
  - {name: CO, area: input, address: 6, unit: ppm}
  - {name: Widgets, area: input, address: 7}
  - {name: Tiny, area: input, address: 8, type: int16, scale: 0.001}
  - {name: Fault, area: discrete, address: 0}
  - {name: PowerOK, area: discrete, address: 1}
`)
	want := map[string]string{
		"AirTemperature": "diurnal", "RelativeHumidity": "diurnal", "WindSpeed": "gust",
		"WindDirection": "angle", "Rainfall": "rain", "CH4": "drift", "CO": "drift",
		"Widgets": "walk", "Tiny": "walk", "Fault": "constant", "PowerOK": "constant",
	}
	for i := range p.Registers {
		r := &p.Registers[i]
		m := newModel(r, 1, day0)
		if m.kind != want[r.Name] {
			t.Errorf("%s: model %s, want %s", r.Name, m.kind, want[r.Name])
		}
		if r.Name == "Rainfall" && !m.counter {
			t.Error("Rainfall in mm is not a counter")
		}
		if r.Name == "RelativeHumidity" && m.peak > 8 {
			t.Errorf("humidity peaks at %v h, want before dawn", m.peak)
		}
		if r.Name == "Tiny" && (m.min < -32.768 || m.max > 32.767) {
			t.Errorf("Tiny: range %v..%v beyond what int16·0.001 encodes", m.min, m.max)
		}
	}
	e := newEmu(t, []Device{{Slave: 1, Profile: p}}, Options{})
	v := e.Values(1, fixedNow)
	if v["Fault"] != 0 || v["PowerOK"] != 1 {
		t.Errorf("Fault %v PowerOK %v, want 0 and 1", v["Fault"], v["PowerOK"])
	}
	if tv := v["AirTemperature"]; tv < 5 || tv > 30 {
		t.Errorf("AirTemperature %v", tv)
	}
}

// TestDriftSpikeIsShort: a spike is a short excursion, not the whole
// minute: with a spike in every minute, the methane profile's reading
// (0.02-1.6 %VOL) is past its 1.0 %VOL alarm for a fifth of the time or
// so, so that a 20 s demo shows alarms now and then rather than nothing
// else.
func TestDriftSpikeIsShort(t *testing.T) {
	m := testModel("drift", 0.02, 1.6)
	m.spike = 1
	alarms, n := 0, 0
	for s := time.Duration(0); s < 2*time.Hour; s += time.Second {
		if m.value(day0.Add(s)) >= 1 {
			alarms++
		}
		n++
	}
	if share := float64(alarms) / float64(n); share < 0.08 || share > 0.3 {
		t.Fatalf("past the alarm %.0f%% of the time, want 8-30%%", 100*share)
	}
}
