// Package metrics serves the gateway's Prometheus metrics and its health
// and readiness endpoints.
//
// Nothing is instrumented on the hot paths. The [Sources] handed to
// [NewCollector] are snapshot functions that the packages already offer
// ([sensors.Bus.Status], [buffer.Buffer.Stats], [uplink.Delivery.Stats],
// [selector.Table.Snapshot], [modbus.Client.Stats]); the collector calls
// them once per scrape and turns the copies into constant metrics. A scrape
// therefore costs a few mutex-protected copies and one read-only bbolt
// transaction, and nothing at all happens between scrapes.
//
// [Handler] serves the collector's metrics and the Go runtime and process
// figures (under the reference client's names: go_goroutines,
// process_resident_memory_bytes, …) on /metrics in the Prometheus text
// exposition format, with /healthz (the process is alive) and /readyz (the
// site is ready, see [Sources.Ready]). [Serve] serves it, on a loopback address
// unless remote access is explicitly allowed, until its context ends.
//
// [NewHandler] mounts more pages beside them (the status page of package
// status, built from the same [Sources]) and, for a listener open to the
// LAN, an [Auth]: clients that are not on loopback present a token, as a
// bearer header or as the cookie its login sets, and their failed attempts
// are rate-limited. Every method but GET and HEAD is answered 405.
//
// # Choices
//
// The text format is written here (expo.go), not by the reference client
// library: that library links the protobuf runtime, 3.9 MiB of a 13 MiB ARM
// binary that must stay under 10 MiB. Tests parse every byte written with
// the reference parser and run the reference linter over it.
//
// Poll latency. A device exposes the duration of its latest poll as a gauge
// (fieldlink_device_last_poll_duration_seconds). A summary or histogram
// needs a running sum or per-poll buckets, which a snapshot of
// [sensors.DeviceStatus] does not carry; the mean poll time of a bus over
// any range is rate(fieldlink_bus_busy_seconds_total) divided by the summed
// rate(fieldlink_device_polls_total) of its devices.
//
// Bus utilisation is a counter of busy seconds (fieldlink_bus_busy_seconds_total),
// as node_cpu_seconds_total is for a CPU: rate() of it over any window is the
// fraction of wall time the bus was busy, 0 to 1. A ratio gauge would have to
// pick a window, or keep state between scrapes.
//
// Upstream latency. fieldlink_upstream_latency_seconds is a histogram of
// every delivery's latency, failures included, with the buckets of
// [selector.LatencyBuckets] (5 ms to 30 s), kept by the selector's table as
// it records each delivery; the EWMA, peak EWMA, standard deviation and
// probe round-trip are gauges beside it.
//
// Device health is an enum in the style of node_exporter's systemd unit
// state: fieldlink_device_health{state="unknown|ok|degraded|offline"} has
// one series per state, 1 for the current one and 0 for the others, so
// that `fieldlink_device_health{state="offline"} == 1` alerts and
// `sum by (state) (fieldlink_device_health)` counts devices per state.
//
// Readings. With [Sources.Readings] (the site file's metrics.readings),
// fieldlink_reading{device,point,unit} is each point's latest good
// reading. A stale or bad point, a string or a NaN has no series: a 0
// would read as a measurement on a graph, and an absent series is what
// Prometheus' own staleness handling expects.
//
// Values with no sample yet (latency gauges before the first delivery,
// the probe round-trip before the first successful probe) are left out
// rather than reported as 0. The buffer's metrics are left out on a site
// without a buffer.
package metrics
