package selector

import (
	"math"
	"time"
)

// Load is what an upstream reports about itself (an HTTP load endpoint, an
// MQTT retained load topic), in the spirit of gRPC's ORCA load reports: a
// gateway cannot observe a server's utilisation, only be told it.
type Load struct {
	// Utilisations, 0..1.
	CPU, Memory, DiskIO, Network float64
	// Counts at the time of the report.
	Processes, Connections int
	// Capacities: CPU speed, memory size, network bandwidth.
	CPUMHz, MemoryMB, BandwidthMbps float64
	// At is when the report was taken. The uplink may set it to the time it
	// received the report when server clocks are not to be trusted.
	At time.Time
}

// LatencyBuckets are the upper bounds of Stats.LatencyCumulative: the
// delivery latencies a field uplink sees, from a LAN broker to a satellite
// link or a timeout.
var LatencyBuckets = [...]time.Duration{
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second,
}

// Stats is a copy of one upstream's statistics at one instant, for metrics,
// the selector lab and tests. Durations are 0 when there is no sample.
type Stats struct {
	Name    string
	Index   int
	Up      bool // connection state from [Table.SetUp]
	Retired bool
	Weight  int

	InFlight int    // deliveries begun and not ended
	Requests uint64 // deliveries ended, failed or not (canceled ones excluded)

	Failures            uint64    // failed deliveries, ever
	ConsecutiveFailures uint64    // failures since the last success
	FailuresLastSecond  int       // Ribbon's FailureCount: the current 1 s bucket of failures
	Timeouts            uint64    // failures that were timeouts
	LastFailure         time.Time // zero when none
	LastTimeout         time.Time // zero when none

	LastLatency time.Duration // of the latest delivery
	// LatencyEWMA is the exponentially weighted moving average of delivery
	// latency, weight e^(−Δt/τ) for the old value (τ = Options.Decay).
	LatencyEWMA time.Duration
	// PeakEWMA is p2c_ewma's cost estimate, decayed to now: like LatencyEWMA
	// but reset up to any slower latency, with failures recorded as at least
	// Options.FailurePenalty.
	PeakEWMA time.Duration
	// LatencyMean and LatencyStdDev (population σ) are over the last
	// Samples latencies (at most Options.Window).
	LatencyMean   time.Duration
	LatencyStdDev time.Duration
	Samples       int
	// LifetimeMean and LifetimeStdDev (population σ, Welford) are over every
	// latency ever recorded, like Ribbon's ResponseTimeAvg and
	// ResponseTimeStdDev; LifetimeSamples counts them.
	LifetimeMean    time.Duration
	LifetimeStdDev  time.Duration
	LifetimeSamples uint64
	// LatencySum is the sum of those latencies, and LatencyCumulative[i]
	// how many were at most LatencyBuckets[i]: a Prometheus histogram.
	LatencySum        time.Duration
	LatencyCumulative [len(LatencyBuckets)]uint64

	ProbeRTT                 time.Duration // of the latest successful probe; 0 when none
	ProbeAge                 time.Duration // since that probe
	ProbeFailures            uint64
	ConsecutiveProbeFailures uint64

	// Load is the latest server-reported load while it is fresh
	// (Options.LoadTTL), nil otherwise. LoadAge is the age of the latest
	// report, fresh or not (never negative), 0 when none ever came.
	Load    *Load
	LoadAge time.Duration
}

// Snapshot copies the statistics of every upstream, by index, retired ones
// included. Each upstream is copied consistently; the set as a whole is not
// one atomic instant.
func (t *Table) Snapshot() []Stats {
	n := t.Len()
	out := make([]Stats, n)
	loads := make([]Load, n)
	now := t.now()
	t.touch(now)
	clock := int64(now.Sub(t.epoch))
	for i := range n {
		u := t.ups[i].Load()
		s := &out[i]
		s.Name, s.Index = u.name, i
		s.Up, s.Retired = u.up.Load(), u.retired.Load()
		s.Weight = int(t.slots[i].weight.Load())
		if st := t.slots[i].state.Load(); st>>genShift == u.gen {
			s.InFlight = int(inflight(st))
		}

		u.mu.Lock()
		if u.peakLog.Load() != noCost {
			s.PeakEWMA = dur(u.peakCost * decay(clock-u.peakStamp, t.tau))
		}
		s.Requests = u.requests.Load()
		s.Failures = u.failures.Load()
		s.ConsecutiveFailures = u.consecutive.Load()
		if clock < u.failBucketEnd {
			s.FailuresLastSecond = u.failBucket
		}
		s.Timeouts = u.timeouts
		s.LastFailure, s.LastTimeout = u.lastFailure, u.lastTimeout
		if u.count > 0 {
			s.LastLatency = time.Duration(u.last)
			s.LatencyEWMA = dur(u.ewma)
		}
		m, sd := u.windowStats()
		s.LatencyMean, s.LatencyStdDev, s.Samples = dur(m), dur(sd), u.ringLen
		m, sd = u.lifetime()
		s.LifetimeMean, s.LifetimeStdDev, s.LifetimeSamples = dur(m), dur(sd), u.count
		s.LatencySum = u.sum
		var c uint64
		for i, n := range u.hist {
			c += n
			s.LatencyCumulative[i] = c
		}
		if rtt := u.probeRTT.Load(); rtt > 0 {
			s.ProbeRTT = time.Duration(rtt)
			s.ProbeAge = max(now.Sub(u.probeAt), 0)
		}
		s.ProbeFailures, s.ConsecutiveProbeFailures = u.probeFailures, u.probeConsecutive
		if u.hasLoad {
			s.LoadAge = max(now.Sub(u.load.At), 0)
			if s.LoadAge <= t.loadTTL {
				loads[i] = u.load
				s.Load = &loads[i]
			}
		}
		u.mu.Unlock()
	}
	return out
}

// dur rounds ns to a Duration.
func dur(ns float64) time.Duration { return time.Duration(math.Round(ns)) }
