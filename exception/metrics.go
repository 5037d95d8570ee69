package exception

import "fieldlink/metrics"

var (
	heldBack       = metrics.NewCounter("fieldlink_packets_held_back_total", "Polled packets report by exception kept from the buffer: no point beyond its deadband, no heartbeat due, no alarm.")
	metricFamilies = []*metrics.Desc{heldBack}
)

// Metrics are what report by exception kept from the buffer, as metrics.
type Metrics struct {
	// HeldBack returns how many polled packets it kept from the buffer;
	// nil leaves the family out.
	HeldBack func() uint64
}

// Families implements [metrics.Collector].
func (Metrics) Families() []*metrics.Desc { return metricFamilies }

// Collect implements [metrics.Collector].
func (m Metrics) Collect(s *metrics.Scrape) {
	if m.HeldBack != nil {
		s.Add(heldBack, float64(m.HeldBack()))
	}
}
