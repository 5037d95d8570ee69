package fleet

import "fieldlink/metrics"

var (
	remoteSerial   = metrics.NewGauge("fieldlink_remote_config_serial", "Serial of the bundle the remote configuration last reported on.")
	remoteState    = metrics.NewGauge("fieldlink_remote_config_state", "The remote configuration's last report: 1 for its state (applied, probation, reverted, refused).", "state")
	metricFamilies = []*metrics.Desc{remoteSerial, remoteState}
)

// Metrics are the remote configuration's last report as metrics. The
// state is an enum: one series per state, 1 for the reported one.
type Metrics struct {
	// Report returns the last report; nil without remote_config, or
	// before its first report.
	Report func() *Report
}

// Families implements [metrics.Collector].
func (Metrics) Families() []*metrics.Desc { return metricFamilies }

// Collect implements [metrics.Collector].
func (m Metrics) Collect(s *metrics.Scrape) {
	if m.Report == nil {
		return
	}
	r := m.Report()
	if r == nil {
		return
	}
	s.Add(remoteSerial, float64(r.Serial))
	for _, st := range []string{StateApplied, StateProbation, StateReverted, StateRefused} {
		s.Add(remoteState, metrics.Bool(r.State == st), st)
	}
}
