// Package agent is fieldlink's composition root: it turns a loaded site
// file into a running gateway, and is the one place where the packages
// meet. `gateway run`, `gateway demo` and the chaos harness (which runs
// `gateway run` as a process) all go through [Start], so a fix here reaches
// all three.
//
// What it wires, for one site:
//
//	sensors.Poller (buses, serial sensors) ──► appender ──► buffer.Buffer
//	                                                          │
//	          uplink.Pool (upstreams, probes, load) ◄── uplink.Delivery ◄── selector
//
// [OpenSensors] maps the site file's buses and serial sensors to the sensors
// package; [OpenBuffer] its buffer settings to the buffer package; the
// uplink side maps upstreams (passwords read, TLS loaded) to an
// [fieldlink/uplink.Pool], the selector named by the file to a strategy,
// and a registry, if any, to the pool's reconcile. [Agent.Reload]
// applies a changed site file to the running parts (see
// [fieldlink/config.Diff]); [Agent.Sources] feeds the metrics endpoints.
//
// docs/architecture.md walks the data path and the goroutines.
package agent
