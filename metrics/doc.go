// Package metrics is the gateway's Prometheus exposition: the text format,
// the [Collector] a component implements to expose its statistics, the Go
// runtime and process figures, and the listener that serves /metrics, its
// health and readiness endpoints and the pages mounted beside them.
//
// Nothing is instrumented on the hot paths. A component's collector reads
// the snapshot its package already offers ([Collector.Collect] is called
// once per scrape) and turns the copy into series of the families it
// describes ([Collector.Families]). A scrape therefore costs a few
// mutex-protected copies and one read-only bbolt transaction, and nothing
// at all happens between scrapes.
//
// [Handler] serves the collectors' families, in order, and the Go runtime
// and process figures (under the reference client's names: go_goroutines,
// process_resident_memory_bytes, …) on /metrics in the Prometheus text
// exposition format, with /healthz (the process is alive) and /readyz (the
// site is ready, see [HandlerOptions.Ready]). [Serve] serves it, on a
// loopback address ([LoopbackHost]) unless remote access is explicitly
// allowed, until its context ends.
//
// [NewHandler] mounts more pages beside them (the status page of package
// status) and, for a listener open to the LAN, an [Auth]: clients that are
// not on loopback present a token, as a bearer header or as the cookie its
// login sets, and their failed attempts are rate-limited. Every method but
// GET and HEAD is answered 405.
//
// # Choices
//
// Each component owns its metrics, as node_exporter's collectors do: the
// family names, HELP texts and types sit in the component's metrics.go,
// beside the statistics they expose (sensors, sensors/modbus,
// buffer/cardstore, uplink, selector, downlink, fleet, exception), and
// implement [Collector]. Package metrics imports none of them: it is a leaf,
// below every package it describes, so that a component can import it and
// a new metric changes one package. The agent, the composition root, lists
// the collectors over its snapshot functions, in the order /metrics writes
// them; the order of families within a collector is the collector's.
// Collectors in the components rather than adapters in the agent: a
// family's name and meaning change with the statistic it reads, and the
// agent would have to import every statistics type again to adapt it.
//
// The text format is written here (expo.go), not by the reference client
// library: that library links the protobuf runtime, 3.9 MiB of a 13 MiB ARM
// binary that must stay under 10 MiB. Tests parse every byte written with
// the reference parser and run the reference linter over it; the agent's
// tests hold the whole exposition of a representative gateway to a golden
// file byte for byte.
//
// A family is described once, at start, by [NewCounter], [NewGauge] or
// [NewHistogram]; a scrape adds series to a [Scrape] and writes each family
// with its HELP and TYPE and its series sorted by label values. A family
// without series is left out, and so are values with no sample yet (a
// latency before the first delivery) rather than reported as 0. A series
// that cannot be written (a label value that is not UTF-8) is left out and
// counted in fieldlink_metrics_scrape_errors_total, not the whole scrape.
package metrics
