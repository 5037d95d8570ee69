// Package lab is the selector lab: a discrete-event simulator, in virtual
// time, that runs the selector package's strategies unmodified against
// simulated upstreams and compares them.
//
// Upstreams are FIFO queues in front of c workers with lognormal service
// times; each (gateway, upstream) pair has its own round trip; gateways send
// open-loop Poisson arrivals and time requests out. Each gateway keeps its
// own [selector.Table] on the simulated clock and feeds it as the uplink
// does (Begin/End, Probe, Report, SetUp). Latency is measured from when a
// request should have been sent, so stalls are not hidden (no coordinated
// omission). Arrivals and service draws come from streams that do not
// depend on the strategy (common random numbers).
//
// Scenarios S1–S6 pick per request and make the verdict; S7 adds a server
// to every table mid-run (a cold join), and S8 is MQTT placement: each of
// 1,000 gateways picks a broker once per connection ([Placement]) and
// reconnects when its broker dies. Besides latency and success, a [Trial]
// measures convergence after faults and recoveries, oscillation of the
// servers' shares, how a joining server is taken up, and the balance of a
// placement.
//
// [Simulate] runs one strategy in one [Scenario] with one seed; [Run] runs
// a set of scenarios × strategies × seeds and returns a [Report], with
// bootstrap 95% confidence intervals over seeds, which renders as Markdown
// ([Report.Markdown]) and SVG charts ([Report.SVGs]). The same
// configuration gives byte-identical output. The command "gateway lab"
// regenerates docs/selector-lab.md.
//
// The files follow the concepts: queue.go is the event queue, model.go the
// simulated upstreams and gateways (what each event does), measure.go what
// a [Trial] measures, sim.go the run that ties them together, scenario.go
// the scenarios, report.go and markdown.go the report.
package lab
