package uplink

import "fieldlink/metrics"

// The delivery loop's families ([DeliveryStats]).
var (
	delRetries      = metrics.NewCounter("fieldlink_delivery_retries_total", "Batches tried again on another upstream after a failure.")
	delReleased     = metrics.NewCounter("fieldlink_delivery_released_records_total", "Records returned to the buffer undelivered after every attempt failed.")
	delDeadLettered = metrics.NewCounter("fieldlink_delivery_dead_lettered_records_total", "Records an upstream refused for good, dead-lettered.")
	delInFlight     = metrics.NewGauge("fieldlink_delivery_in_flight_batches", "Batches being delivered.")
	upPicks         = metrics.NewCounter("fieldlink_upstream_picks_total", "Times the selector picked the upstream for a batch, retries included.", "upstream")
	upDelivered     = metrics.NewCounter("fieldlink_upstream_delivered_records_total", "Records the upstream acknowledged.", "upstream")

	metricFamilies = []*metrics.Desc{delRetries, delReleased, delDeadLettered, delInFlight, upPicks, upDelivered}
)

// Metrics are the delivery loop's counters ([Delivery.Stats]) as metrics.
type Metrics struct {
	// Delivery returns the delivery loop's counters; ok is false when the
	// site has no uplink, and nil or not ok leaves the families out.
	Delivery func() (st DeliveryStats, ok bool)
}

// Families implements [metrics.Collector].
func (Metrics) Families() []*metrics.Desc { return metricFamilies }

// Collect implements [metrics.Collector].
func (m Metrics) Collect(s *metrics.Scrape) {
	if m.Delivery == nil {
		return
	}
	st, ok := m.Delivery()
	if !ok {
		return
	}
	s.Add(delRetries, float64(st.Retried))
	s.Add(delReleased, float64(st.Released))
	s.Add(delDeadLettered, float64(st.DeadLettered))
	s.Add(delInFlight, float64(st.InFlight))
	for _, u := range st.Upstreams {
		s.Add(upPicks, float64(u.Picked), u.Name)
		s.Add(upDelivered, float64(u.Delivered), u.Name)
	}
}
