// Package selector picks the upstream server for each delivery, on the
// gateway, from statistics the gateway keeps about every upstream. It does
// no I/O: the uplink package feeds it and asks it.
//
// # Table
//
// A [Table] holds the live statistics of a set of upstreams, each known by
// the index [Table.Add] returned:
//
//   - deliveries: [Table.Begin] when one starts (in flight + 1) and
//     [Table.End] when it ends, with its outcome. From these the table keeps
//     the in-flight count, requests, failures (total, consecutive, in
//     Ribbon's one-second bucket), timeouts, the latest latency, a latency
//     EWMA, the peak EWMA that p2c_ewma uses, the mean and standard
//     deviation over the last Options.Window latencies (a ring buffer), and
//     the lifetime mean and standard deviation (Welford), which is what
//     Ribbon keeps;
//   - probes: [Table.Probe], the round-trip of a latency probe, or its failure;
//   - load: [Table.Report], what the upstream says about its own CPU,
//     memory, disk IO, network, processes, connections and capacities. It is
//     fresh for Options.LoadTTL; strategies that need load must fall back
//     when none is fresh, not guess;
//   - state: [Table.SetUp] (the uplink's view of the connection) and
//     [Table.Retire] (the registry dropped it).
//
// [Table.Snapshot] copies it all, for metrics, the lab and tests.
//
// A Table is safe for concurrent use; Begin, End and Pick do not allocate,
// and Pick takes no lock on the table. Time comes from Options.Now and
// randomness from Options.Seed, so that with an injected clock and a seed
// every strategy is deterministic.
//
// # Picking
//
// A [Strategy] picks one upstream for a delivery: [Strategy.Pick](t, skip)
// returns an upstream that is up, not retired and not in skip (the
// upstreams this delivery already tried), or ok=false when there is none.
// A down upstream is never picked, even when every upstream is down: then
// the uplink backs off and the packets wait in the buffer. At most
// [MaxUpstreams] (64) upstreams are live at once, one bit each in skip.
//
// [New] makes a strategy from its config name; [Names] lists them. These
// are the baselines every other strategy is measured against:
//
//   - round_robin: the candidates in index order, as Ribbon's RoundRobinRule.
//   - weighted_round_robin: nginx's smooth weighted round robin, current_i +=
//     effective_i, pick the largest, subtract the total from it; weights 5,
//     1, 1 give a a b a c a a.
//   - random: uniform over the candidates.
//   - least_conn: fewest in flight per unit of weight, as nginx's least_conn
//     and LVS's wlc; ties at random.
//   - p2c_ewma: power of two choices over Finagle's and linkerd's peak EWMA,
//     load = cost × (in_flight + 1), τ = 10 s, failures as a 5 s
//     round-trip.
//   - ribbon_wrt: Ribbon's WeightedResponseTimeRule, w_i = Σ avg − avg_i
//     over lifetime averages, recomputed every 30 s.
//
// Each strategy's doc comment in the source gives its exact formula, its
// source, and where and why it departs from it. Every strategy passes the
// conformance suite in package selectortest.
//
// # What callers use
//
// [New] and [StrategyOptions] are the only way to a strategy: the concrete
// strategies are this package's own. A name followed by "+outlier" puts it
// behind Envoy's outlier ejection ([OutlierOptions]), which reads the
// table's own counters on the pick path, without the allocation of a
// [Table.Snapshot]. irlb's strategy is a [Trained]: the daemon trains its
// model and keeps it in the buffer file.
//
// The offline numerics are packages of their own, off the pick path:
// selector/cuckoo (the cuckoo search cswlc recomputes with and the lab
// tunes with), selector/lstm (irlb's predictor) and selector/delphi (drf's
// expert step, run by gateway delphi).
//
// The recomputed strategies (soa, load_aware, drf, ribbon_wrt, cswlc, irlb)
// share one refresher (refresh.go): one staleness rule, one double buffer.
package selector
