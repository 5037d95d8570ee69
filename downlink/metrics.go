package downlink

import "fieldlink/metrics"

var (
	commandsTotal  = metrics.NewCounter("fieldlink_commands_total", "Downlink commands by outcome: done, rejected, expired, failed, unknown_outcome.", "status")
	metricFamilies = []*metrics.Desc{commandsTotal}
)

// Metrics are the engine's commands by outcome ([Engine.Counts]) as
// metrics.
type Metrics struct {
	// Commands returns how many commands ended in each status; nil
	// without a downlink.
	Commands func() map[string]uint64
}

// Families implements [metrics.Collector].
func (Metrics) Families() []*metrics.Desc { return metricFamilies }

// Collect implements [metrics.Collector].
func (m Metrics) Collect(s *metrics.Scrape) {
	if m.Commands == nil {
		return
	}
	for status, n := range m.Commands() {
		s.Add(commandsTotal, float64(n), status)
	}
}
