// Package cluster holds the clustered-broker tier (make cluster-check): the
// gateway, as a process, delivers to a three-node NATS cluster through its
// MQTT listeners while nodes are killed, cut off, slowed and the whole
// cluster goes down, and a platform-side subscriber with a persistent
// session records every (GatewayId, Epoch, Seq) it receives. The test fails
// on any packet lost; it prints one figures line per fault. What it found
// about the engine is in docs/cluster.md.
//
// TestFleet runs 50 gateways (real agents in the test process, each with
// its own buffer and a connection to every node) at the demo farm's rate
// while a node restarts: the reconnections' spread, the return of the
// node's connections and traffic, the nodes' load, and nothing lost, per
// strategy (CLUSTER_FLEET=1, make cluster-check-fleet: drf_cswlc, p2c_ewma
// and round_robin; make cluster-check runs drf_cswlc alone, shorter).
//
// The tests build only with -tags cluster (go test ./... leaves them to
// make cluster-check). They need Debian's nats-server (2.9.10 in
// bookworm): they skip without it, and fail under CI=true. CLUSTER_LONG=1
// (make cluster-check-long) makes every fault phase last a minute.
package cluster
