package selector

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// noCost marks a peak EWMA with no sample yet. It is a NaN bit pattern, which
// an estimate never holds.
const noCost = ^uint64(0)

// upstream is the state of one upstream. What Pick reads is atomic; the rest
// is guarded by mu, held for a few field updates at a time.
type upstream struct {
	name  string
	index int
	gen   uint64 // the slot generation it holds; its in-flight count is in Table.slots[index]

	up      atomic.Bool // written under Table.mu
	retired atomic.Bool // written under Table.mu

	requests    atomic.Uint64
	failures    atomic.Uint64
	consecutive atomic.Uint64
	probeRTT    atomic.Int64 // ns of the last successful probe; 0 = none yet

	// The peak EWMA as p2c_ewma reads it, lock-free, in one word: the
	// float64 bits of ln(cost) + stamp/τ (cost in ns, stamp the table time
	// of the latest sample), noCost until the first sample. The cost decayed
	// to time T is e^(peakLog − T/τ), and comparing two upstreams' decayed
	// costs needs no T at all. Written under mu.
	peakLog atomic.Uint64

	mu sync.Mutex

	// Ribbon's MeasuredRate(1 s) of failures: the bucket restarts at the
	// first failure after it ended.
	failBucket    int
	failBucketEnd int64
	timeouts      uint64
	lastFailure   time.Time
	lastTimeout   time.Time

	last      int64   // latest latency, ns
	ewma      float64 // ns
	ewmaStamp int64
	peakCost  float64 // ns, at peakStamp
	peakStamp int64
	ring      []int64 // latest latencies, ns; ring[ringNext] is the oldest once full
	ringNext  int
	ringLen   int

	// Welford's running mean and sum of squared deviations over every
	// latency, in ns.
	count uint64
	mean  float64
	m2    float64
	// hist counts latencies per LatencyBuckets bound (not cumulative; the
	// ones above the last bound are count minus their sum); sum is exact.
	hist [len(LatencyBuckets)]uint64
	sum  time.Duration

	probeAt          time.Time
	probeFailures    uint64
	probeConsecutive uint64

	load    Load
	hasLoad bool
}

func newUpstream(name string, index int, gen uint64, window int) *upstream {
	u := &upstream{name: name, index: index, gen: gen, ring: make([]int64, window)}
	u.up.Store(true)
	u.peakLog.Store(noCost)
	return u
}

// record adds the outcome of one delivery that ran from start to end.
func (t *Table) record(u *upstream, start, end time.Time, err error) {
	lat := max(int64(end.Sub(start)), 0)
	now := int64(end.Sub(t.epoch))
	t.touch(end)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.requests.Add(1)
	peak := lat
	if err != nil {
		u.failures.Add(1)
		t.fail.Add(1)
		u.consecutive.Add(1)
		if now >= u.failBucketEnd {
			u.failBucket = 0
			u.failBucketEnd = now + int64(time.Second)
		}
		u.failBucket++
		u.lastFailure = end
		if isTimeout(err) {
			u.timeouts++
			u.lastTimeout = end
		}
		peak = max(peak, t.penalty)
	} else {
		u.consecutive.Store(0)
	}

	u.last = lat
	if u.count == 0 {
		u.ewma = float64(lat)
	} else {
		w := decay(now-u.ewmaStamp, t.tau)
		u.ewma = u.ewma*w + float64(lat)*(1-w)
	}
	u.ewmaStamp = now

	u.ring[u.ringNext] = lat
	u.ringNext = (u.ringNext + 1) % len(u.ring)
	u.ringLen = min(u.ringLen+1, len(u.ring))

	u.count++
	u.sum += time.Duration(lat)
	for i, b := range LatencyBuckets {
		if time.Duration(lat) <= b {
			u.hist[i]++
			break
		}
	}
	d := float64(lat) - u.mean
	u.mean += d / float64(u.count)
	u.m2 += d * (float64(lat) - u.mean)

	u.observePeak(float64(peak), now, t.tau)
}

// observePeak adds one round-trip rtt (ns) at table time now to the peak
// EWMA, as Finagle's PeakEwma and tower's RttEstimate do: an rtt above the
// current estimate decayed to now replaces it; otherwise, with
// w = e^(−Δt/τ) and Δt the time since the previous sample,
// cost = cost·w + rtt·(1−w). u.mu is held.
func (u *upstream) observePeak(rtt float64, now int64, tau float64) {
	cost := rtt
	if u.peakLog.Load() != noCost {
		w := decay(now-u.peakStamp, tau)
		if old := u.peakCost * w; rtt <= old {
			cost = old + rtt*(1-w)
		}
	}
	u.peakCost, u.peakStamp = cost, now
	u.peakLog.Store(math.Float64bits(math.Log(cost) + float64(now)/tau))
}

// peakAt returns the peak EWMA decayed to table time now (ns), and false
// when no delivery has ended yet. It takes no lock and writes nothing back.
func (u *upstream) peakAt(now int64, tau float64) (float64, bool) {
	k := u.peakLog.Load()
	if k == noCost {
		return 0, false
	}
	return math.Exp(math.Float64frombits(k) - float64(now)/tau), true
}

// decay is e^(−dt/τ), and 1 for dt ≤ 0 (a clock that went back).
func decay(dt int64, tau float64) float64 {
	if dt <= 0 {
		return 1
	}
	return math.Exp(-float64(dt) / tau)
}

// isTimeout reports whether err says the delivery timed out.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// windowStats returns the mean and population standard deviation of the
// latencies in the window; u.mu is held.
func (u *upstream) windowStats() (mean, sd float64) {
	if u.ringLen == 0 {
		return 0, 0
	}
	var sum float64
	for _, x := range u.ring[:u.ringLen] {
		sum += float64(x)
	}
	mean = sum / float64(u.ringLen)
	var ss float64
	for _, x := range u.ring[:u.ringLen] {
		d := float64(x) - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(u.ringLen))
}

// lifetime returns the mean and population standard deviation of every
// latency recorded (Welford); u.mu is held.
func (u *upstream) lifetime() (mean, sd float64) {
	if u.count == 0 {
		return 0, 0
	}
	return u.mean, math.Sqrt(u.m2 / float64(u.count))
}
