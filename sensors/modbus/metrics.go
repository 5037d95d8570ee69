package modbus

import "fieldlink/metrics"

// The client's counters, by bus.
var (
	mbRequests  = metrics.NewCounter("fieldlink_modbus_requests_total", "Modbus requests written to the bus.", "bus")
	mbResponses = metrics.NewCounter("fieldlink_modbus_responses_total", "Well-formed Modbus replies, data or exception.", "bus")
	mbErrors    = metrics.NewCounter("fieldlink_modbus_errors_total", "Failed Modbus exchanges by kind: timeout, crc, exception, frame (short or unexpected reply), io (the link failed).", "bus", "kind")
	mbSent      = metrics.NewCounter("fieldlink_modbus_sent_bytes_total", "Bytes written to the bus, framing included.", "bus")
	mbReceived  = metrics.NewCounter("fieldlink_modbus_received_bytes_total", "Bytes read from the bus, discarded ones included.", "bus")
	mbDiscarded = metrics.NewCounter("fieldlink_modbus_discarded_bytes_total", "Bytes read from the bus and thrown away: stale input or stale replies.", "bus")

	metricFamilies = []*metrics.Desc{mbRequests, mbResponses, mbErrors, mbSent, mbReceived, mbDiscarded}
)

// Metrics are the Modbus clients' counters ([Client.Stats]) as metrics.
type Metrics struct {
	// Stats returns each bus's client counters, by bus name; nil leaves
	// the metricFamilies out.
	Stats func() map[string]Stats
}

// Families implements [metrics.Collector].
func (Metrics) Families() []*metrics.Desc { return metricFamilies }

// Collect implements [metrics.Collector].
func (m Metrics) Collect(s *metrics.Scrape) {
	if m.Stats == nil {
		return
	}
	for bus, st := range m.Stats() {
		s.Add(mbRequests, float64(st.Requests), bus)
		s.Add(mbResponses, float64(st.Responses), bus)
		s.Add(mbErrors, float64(st.Timeouts), bus, "timeout")
		s.Add(mbErrors, float64(st.CRCErrors), bus, "crc")
		s.Add(mbErrors, float64(st.Exceptions), bus, "exception")
		s.Add(mbErrors, float64(st.FrameErrors), bus, "frame")
		s.Add(mbErrors, float64(st.IOErrors), bus, "io")
		s.Add(mbSent, float64(st.BytesSent), bus)
		s.Add(mbReceived, float64(st.BytesReceived), bus)
		s.Add(mbDiscarded, float64(st.Discarded), bus)
	}
}
