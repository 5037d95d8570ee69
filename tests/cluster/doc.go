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
// TestFleetBrokers runs the same fleet on three independent mosquitto
// brokers, one killed and started again, held to the targets of nodes that
// answer alike.
//
// TestLimit (make cluster-check-limit) puts a node, or every node, behind a
// proxy that passes at most a budget of publishes a second and times each
// PUBACK; TestScale (make cluster-check-scale) adds gateways until the
// machine no longer keeps up and restarts a node at the largest fleet that
// did; make cluster-check-fleet runs both after TestFleet.
//
// TestRabbit (make cluster-check-long only) runs the gateway against a
// second clustered engine, three rabbitmq-server nodes with the MQTT plugin
// and quorum queues, through a node killed, the subscriber queue's leader
// killed and the whole cluster down; it needs Debian's rabbitmq-server.
//
// The tests build only with -tags cluster (go test ./... leaves them to
// make cluster-check). They need Debian's nats-server (2.9.10 in
// bookworm): they skip without it, and fail under CI=true. CLUSTER_LONG=1
// (make cluster-check-long) makes every fault phase last a minute.
package cluster
