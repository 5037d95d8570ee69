// Package mqtt is the uplink's MQTT kind of upstream: one connection per
// broker that publishes each packet at QoS 1 (its PUBACK is the
// acknowledgement), keeps the gateway's retained status, subscribes to
// commands and load reports, and probes the broker with a publish. [Kind]
// opens it for the core; fieldlink/uplink/kinds registers it. A kind built
// on the connection opens it with [Open] and a [Hook] of its own, and
// drives it through [Upstream] and [Link].
package mqtt
