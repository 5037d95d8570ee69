package uplink

import (
	"time"

	"fieldlink/uplink/internal/probe"
	"fieldlink/uplink/site"
)

// Defaults of the pool and its kinds, where the site file says nothing.
const (
	// DefaultProbeInterval and DefaultProbeTimeout pace [NewProber].
	DefaultProbeInterval = probe.DefaultInterval
	DefaultProbeTimeout  = probe.DefaultTimeout
	// DefaultProbeTopic is where a [Pool]'s MQTT probes publish when
	// [PoolConfig.ProbeTopic] is empty: outside the fieldlink/ tree of
	// the packets and the status, so that a platform subscribed to
	// fieldlink/# never gets a probe, and a broker can deny the probes
	// with one rule (fieldlink-probe/#). {gateway} keeps each gateway's
	// probes apart.
	DefaultProbeTopic = "fieldlink-probe/{site}/{gateway}"
	// DefaultStatusTopic is every MQTT upstream's status topic when
	// [PoolConfig.StatusTopic] is empty.
	DefaultStatusTopic = "fieldlink/{site}/{gateway}/status"
	// DefaultWindow is [PoolConfig.Window] when the site file does not
	// say (uplink.window).
	DefaultWindow = 64
	// DefaultBatch is how many records one POST carries at most when the
	// site file does not say (uplink.batch).
	DefaultBatch = 50
	// RetireGrace is how long a retired upstream stays connected so that
	// the deliveries in flight to it can finish.
	RetireGrace = 30 * time.Second
	// topicOff as [PoolConfig.ProbeTopic] probes MQTT upstreams with TCP
	// connects; as [PoolConfig.StatusTopic], publishes no status.
	topicOff = site.Off
)
