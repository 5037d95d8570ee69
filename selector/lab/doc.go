// Package lab is the selector lab: a discrete-event simulator, in virtual
// time, that runs the selector package's strategies unmodified against
// simulated upstreams and compares them.
//
// Upstreams are FIFO queues in front of c workers with lognormal service
// times; each (gateway, upstream) pair has its own round trip; gateways send
// open-loop Poisson arrivals of packets and time attempts out. Each gateway
// keeps its own [selector.Table] on the simulated clock and feeds it as the
// uplink does (Begin/End, Probe, Report, SetUp), and retries as
// uplink.Delivery does: a failed attempt rests its upstream on that gateway
// and the packet is tried on another (Pick with the skip mask), and when
// none can take it, it waits in the buffer for the loop's backoff. Latency
// is measured per packet from when it should have been sent to its final
// acknowledgement, retries included, so stalls are not hidden (no
// coordinated omission); success is an acknowledgement within the
// scenario's deadline. Arrivals and service draws come from streams that do
// not depend on the strategy (common random numbers).
//
// Every scenario picks per packet except S8, MQTT placement: each of 1,000
// gateways picks a broker once per connection ([Placement]) and reconnects
// when its broker dies. S7 adds an upstream to every table mid-run (a cold
// join), S9 and S10 are high load on 16 varied upstreams and low load on 4
// equal ones, S11 a sinkhole that fails fast while staying up, S12 the
// MQTT shape at fleet scale (500 gateways picking a broker per message),
// S13 the cluster tier's fleet: 50 gateways on three NATS nodes whose
// stream leader answers PUBACKs faster than its followers (Upstream.Forward),
// probed with publishes, with [Trial]'s fleet figures (the busiest node's
// share over its fair share, steady and with a node down, the return of
// traffic to a restarted node, the swing of the shares). S14 and S15 run
// by name only: S14 puts the stream leader, then every node, at a fixed
// budget of publishes a second (Upstream.Budget, the cluster tier's
// TestLimit), S15 is S13's restart with 1,000 and 10,000 gateways, with
// the restarted node's reconnection storm.
// Every scenario counts in the verdict, on p99 and success. Besides those,
// a [Trial] measures the first attempts' success, convergence after faults
// and recoveries, oscillation of the upstreams' shares, how a joining upstream
// is taken up, and the balance of a placement.
//
// [Simulate] runs one strategy in one [Scenario] with one seed; [Run] runs
// a set of scenarios × strategies × seeds and returns a [Report], with
// bootstrap 95% confidence intervals over seeds, which renders as Markdown
// ([Report.Markdown]) and SVG charts ([Report.SVGs]). The same
// configuration gives byte-identical output. The command "gateway lab"
// regenerates docs/selector-lab.md.
//
// The files follow the concepts: queue.go is the event queue, model.go the
// packets, their attempts and what each event does, upstream.go the
// simulated upstreams, gateway.go the simulated gateways' delivery loops,
// measure.go what a [Trial] measures, sim.go the run that ties them
// together, scenario.go the scenarios (limit.go those by name only), report.go and markdown.go the
// report.
package lab
