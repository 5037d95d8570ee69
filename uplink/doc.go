// Package uplink will hold the upstream connections (MQTT, HTTP), latency
// probes, load reports and the delivery loop that takes packets from the
// buffer and acknowledges them once an upstream has them.
package uplink
