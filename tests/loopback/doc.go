// Package loopback is the selector's loopback tier: the gateway's own
// delivery code, over real sockets on 127.0.0.1, checked against the
// simulator of package [fieldlink/selector/lab].
//
// # Why
//
// The lab ranks strategies by simulating them, and its numbers are only as
// good as its model: FIFO upstreams with lognormal service times, one request
// per packet, no delivery window, no retries, a connection state that drops
// the moment an upstream refuses. The real uplink differs in all of these. This
// tier does not try to reproduce the lab's figures; it checks that the real
// code, on real sockets, moves in the same direction: when the simulator
// says strategy A is clearly better than B in a situation, A must also beat
// B here. A disagreement means either the model misses something that
// matters or the code does not do what the model assumes; both need a look
// before the lab's ranking is trusted.
//
// # What runs
//
// The tests (in this package's _test files; the package has no API) start
// four HTTP upstreams with net/http/httptest, each acking batches with a
// 2xx as the uplink expects, and each behind an in-process toxiproxy proxy
// that adds its round trip and, mid-run, the fault. The gateway side is the
// production code unchanged: a [fieldlink/buffer.Buffer] in a temporary
// directory, a [fieldlink/selector.Table] and a strategy from
// [fieldlink/selector.New], a [fieldlink/uplink.Delivery] with one
// [fieldlink/uplink/http.Sender] per upstream (the gateway's default batch and
// window), and a TCP [fieldlink/uplink.Prober] per upstream feeding
// Table.Probe and the sender's ProbeResult as the gateway wires them.
//
// Packets arrive open-loop at a fixed rate, whatever the uplink is doing,
// and each packet's latency runs from its intended arrival time to the
// upstream's ack, so that a stall is measured, not hidden.
//
// Strategies run in blocks, alternated A-B-C-D then D-C-B-A, round after
// round, so that drift on a shared machine hits every strategy alike. Each
// block starts afresh (buffer, table, strategy, connections), runs a
// warm-up on healthy upstreams, then the fault, then drains. The default
// run alternates drf_cswlc, prequal, soa and p2c_ewma; the long one adds
// least_conn and round_robin.
//
// # Scenarios
//
// Each mirrors one of the lab's:
//
//   - S2, slow node: upstream 2 answers 300 ms late during the fault (the
//     lab's S2 makes it 100× slower).
//   - S4c, black hole: upstream 2's proxy accepts and never answers during
//     the fault (toxiproxy's timeout toxic with timeout 0, on open
//     connections too); posts wait for the HTTP timeout (1 s by default, 3
//     s in the long mode) and the delivery retries them elsewhere. Unlike
//     the lab's black hole, a TCP probe still connects to it.
//   - S11, sinkhole: upstream 2's handler answers every batch with HTTP 500
//     at once during the fault, while its proxy stays up.
//   - S7, cold join: three upstreams at first; upstream 3 enters the table
//     and the delivery (Table.Add, then Delivery.Add, as the registry
//     does) when the fault window starts. Its share of the window's sends
//     is reported, and its peak share over five equal parts of the window,
//     over its fair share of 1/4 (the lab's JoinPeak). The peak is shown,
//     not asserted: lower is not better (a strategy that never uses the
//     joiner has peak 0).
//
// The long mode adds:
//
//   - S1, far site: two upstreams 1–2 ms away, two 80 ms away (the lab's
//     S1 also mixes capacities; only its round trips are mirrored here).
//   - S4a, outage: upstream 2's proxy is stopped during the fault, so that
//     connections are refused (the lab's fast failure). The lab orders
//     none of the default strategies there.
//
// # MQTT
//
// The same check runs over MQTT (TestLoopbackMQTTAgreesWithLab): three
// mosquitto brokers, each started by the test on a free port and behind
// its own toxiproxy proxy, and on the gateway side an MQTT upstream per
// broker, opened by [fieldlink/uplink.Open] (QoS 1: a publish counts once
// its PUBACK is in; the gateway's window of 64; the publish timeout of the
// mode) and kept connected by its own Run, with its sender and a TCP
// prober that kicks a reconnect when the broker answers while the
// connection is down, as the gateway's pool wires them. Broker 2 is the faulty one: slow (its PUBACKs come 300
// ms late, S2), a black hole (S4c), refusing connections (its proxy
// stopped, which also closes the open one, S4a), or joining cold (S7).
// drf_cswlc, prequal, soa and p2c_ewma run in both modes, against the same
// lab scenarios, unchanged. A missing mosquitto skips the test, and fails
// it under CI=true.
//
// # Recovery
//
// TestRecovery (long mode only) measures one thing the orderings do not:
// how soon drf_cswlc sends to a broker again once it stops being slow (its
// PUBACKs 1.2 s late for 8 s, so that every packet it gets meanwhile misses
// the 1 s mark), and the share of the slow phase's packets acked within
// 1 s, with the pool's TCP probe and with an MQTT publish probe
// ([fieldlink/uplink.Conn] NewProber), for drf_cswlc's default decay and
// shorter ones, beside the lab's S2 for the same decays. A TCP connect
// answers as fast from a slow broker as from a healthy one, so the only way
// back is the estimate's decay toward it, which also sends packets to the
// broker while it is still slow; a publish probe fails or answers slowly
// while the broker is slow, and its first fast answer brings it back.
//
// For every pair of strategies and every metric (mean latency; the share
// of the fault window's sends that went to the faulty upstream), the test
// runs the lab scenario, unchanged, in the same test: one seed by default
// (the simulator is the costly part under -race), five in the long mode.
// When the lab is clear (the same direction on every seed, by a factor of
// two at least, and for the share by 3 points), the loopback must not
// clearly contradict it: the test fails when the loopback reverses the
// order in every round and, pooled over the rounds, by the same margin.
// A reversal in some rounds only, or by a few per cent, is a shared
// machine's noise and counts as a disagreement in the log, not a failure.
// The test logs, per scenario and in
// all, how many of the lab's clear orderings the loopback agrees with
// ("N of M clear lab orderings agree"). Percentiles are reported too; p99
// is not asserted, because a block of a few seconds puts the sends made
// before a strategy notices the fault above the 99th percentile, which the
// lab's 30 s fault windows do not.
//
// The upstreams answer at once after their round trip: they have no
// service time and no queue, so a lab ordering that comes from queueing
// at 50–70% load (where a strategy spreads load less evenly) has nothing
// here to show itself in.
//
// Set LOOPBACK_LONG=1 for longer blocks, more rounds, more seeds, and over
// HTTP two more strategies and two more scenarios; with -update as well,
// that run rewrites docs/selector-loopback.md: the HTTP test all of it but
// the MQTT section, which the MQTT test rewrites alone.
package loopback
