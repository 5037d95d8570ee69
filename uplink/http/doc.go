// Package http is the uplink's HTTP kind of upstream: an [HTTP] publisher
// posts batches to an ingest endpoint as JSON, or to InfluxDB as line
// protocol, and its [Sender] tells the delivery loop whose fault a failure
// is. [Kind] opens it for the core; fieldlink/uplink/kinds registers it.
package http
