package selector

import "fieldlink/metrics"

// The table's families, per upstream ([Stats]), and the strategy's.
// fieldlink_upstream_latency_seconds is a histogram of every delivery's
// latency, failures included, with the buckets of [LatencyBuckets] (5 ms to
// 30 s), kept by the table as it records each delivery; the EWMA, peak
// EWMA, standard deviation and probe round-trip are gauges beside it, left
// out while they have no sample.
var (
	upFailures        = metrics.NewCounter("fieldlink_upstream_failures_total", "Deliveries to the upstream that failed, timeouts included.", "upstream")
	upTimeouts        = metrics.NewCounter("fieldlink_upstream_timeouts_total", "Deliveries to the upstream that timed out.", "upstream")
	upConsecutive     = metrics.NewGauge("fieldlink_upstream_consecutive_failures", "Failed deliveries to the upstream since its last success.", "upstream")
	upInFlight        = metrics.NewGauge("fieldlink_upstream_in_flight_batches", "Deliveries to the upstream begun and not ended.", "upstream")
	upUp              = metrics.NewGauge("fieldlink_upstream_up", "1 when the upstream can be tried (connected, or its latest probe answered), else 0.", "upstream")
	upRetired         = metrics.NewGauge("fieldlink_upstream_retired", "1 when the upstream was removed from the selection for good, else 0.", "upstream")
	upLatency         = metrics.NewHistogram("fieldlink_upstream_latency_seconds", "Delivery latency, send to acknowledgement, failures included.", "upstream")
	upEWMA            = metrics.NewGauge("fieldlink_upstream_latency_ewma_seconds", "Exponentially weighted moving average of the upstream's delivery latency.", "upstream")
	upPeakEWMA        = metrics.NewGauge("fieldlink_upstream_latency_peak_ewma_seconds", "Peak EWMA cost of the upstream (p2c_ewma), decayed to now.", "upstream")
	upStdDev          = metrics.NewGauge("fieldlink_upstream_latency_stddev_seconds", "Standard deviation of the upstream's latest delivery latencies.", "upstream")
	upProbeRTT        = metrics.NewGauge("fieldlink_upstream_probe_rtt_seconds", "Round-trip time of the upstream's latest successful probe.", "upstream")
	upProbeAge        = metrics.NewGauge("fieldlink_upstream_probe_age_seconds", "Time since the upstream's latest successful probe.", "upstream")
	upProbeFailures   = metrics.NewCounter("fieldlink_upstream_probe_failures_total", "Probes of the upstream that failed.", "upstream")
	selectorInfo      = metrics.NewGauge("fieldlink_selector_info", "The selection strategy in use, in the selector label; always 1.", "selector")
	selectorFallbacks = metrics.NewCounter("fieldlink_selector_fallbacks_total", "Picks the strategy made by its fallback (least_conn) because no fresh server load report existed.", "selector")

	metricFamilies = []*metrics.Desc{upFailures, upTimeouts, upConsecutive, upInFlight, upUp, upRetired,
		upLatency, upEWMA, upPeakEWMA, upStdDev, upProbeRTT, upProbeAge, upProbeFailures, selectorInfo, selectorFallbacks}

	// latencyBounds are LatencyBuckets in seconds.
	latencyBounds = metrics.Seconds(LatencyBuckets[:])
)

// Metrics are the table's statistics and the strategy's as metrics. A nil
// function leaves its families out.
type Metrics struct {
	// Upstreams returns the per-upstream statistics ([Table.Snapshot]).
	Upstreams func() []Stats
	// Strategy returns the name of the strategy in use (a reload may
	// change it); "" leaves out fieldlink_selector_info.
	Strategy func() string
	// Fallbacks returns how many picks the strategy made by its named
	// fallback because no fresh server load report existed (cswlc, irlb,
	// load_aware); nil for a strategy without one.
	Fallbacks func() uint64
}

// Families implements [metrics.Collector].
func (Metrics) Families() []*metrics.Desc { return metricFamilies }

// Collect implements [metrics.Collector].
func (m Metrics) Collect(s *metrics.Scrape) {
	if m.Upstreams != nil {
		for _, st := range m.Upstreams() {
			s.Add(upFailures, float64(st.Failures), st.Name)
			s.Add(upTimeouts, float64(st.Timeouts), st.Name)
			s.Add(upConsecutive, float64(st.ConsecutiveFailures), st.Name)
			s.Add(upInFlight, float64(st.InFlight), st.Name)
			s.Add(upUp, metrics.Bool(st.Up), st.Name)
			s.Add(upRetired, metrics.Bool(st.Retired), st.Name)
			s.Add(upProbeFailures, float64(st.ProbeFailures), st.Name)
			s.AddHistogram(upLatency, st.LatencySum.Seconds(), st.LifetimeSamples, latencyBounds, st.LatencyCumulative[:], st.Name)
			if st.LifetimeSamples > 0 {
				s.Add(upEWMA, st.LatencyEWMA.Seconds(), st.Name)
			}
			if st.PeakEWMA > 0 {
				s.Add(upPeakEWMA, st.PeakEWMA.Seconds(), st.Name)
			}
			if st.Samples > 0 {
				s.Add(upStdDev, st.LatencyStdDev.Seconds(), st.Name)
			}
			if st.ProbeRTT > 0 {
				s.Add(upProbeRTT, st.ProbeRTT.Seconds(), st.Name)
				s.Add(upProbeAge, st.ProbeAge.Seconds(), st.Name)
			}
		}
	}
	if m.Strategy != nil {
		if name := m.Strategy(); name != "" {
			s.Add(selectorInfo, 1, name)
			if m.Fallbacks != nil {
				s.Add(selectorFallbacks, float64(m.Fallbacks()), name)
			}
		}
	}
}
