// Package cluster holds the clustered-broker tier (make cluster-check): the
// gateway, as a process, delivers to a three-node NATS cluster through its
// MQTT listeners while nodes are killed, cut off, slowed and the whole
// cluster goes down, and a platform-side subscriber with a persistent
// session records every (GatewayId, Epoch, Seq) it receives. The test fails
// on any packet lost; it prints one figures line per fault. What it found
// about the engine is in docs/cluster.md.
//
// The test needs Debian's nats-server (2.9.10 in bookworm): it skips
// without it, and fails under CI=true. CLUSTER_LONG=1 (make
// cluster-check-long) makes every fault phase last longer.
package cluster
