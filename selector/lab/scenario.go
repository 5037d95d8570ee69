package lab

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"fieldlink/selector"
)

// FaultKind is how an upstream misbehaves.
type FaultKind uint8

const (
	// FaultNone is a healthy upstream.
	FaultNone FaultKind = iota
	// FastFail: the upstream is down and refuses connections: what it held
	// fails at once, the gateways' connections drop (Table.SetUp false),
	// and they reconnect a second after it is back.
	FastFail
	// BlackHole: the upstream accepts requests and never answers; only
	// timeouts reveal it (no SetUp false, probes fail).
	BlackHole
	// Slow: service times are Factor times longer.
	Slow
	// SlowDeath: service times grow from 1 to Factor times longer over
	// Ramp, and stay there.
	SlowDeath
	// Sinkhole: the upstream answers every request with an error at once
	// (an HTTP 503, a broker that drops every publish) while it stays up:
	// it answers probes, refuses no connection (no Table.SetUp false) and
	// reports no load, since it serves nothing.
	Sinkhole
)

// Fault is one fault of one upstream, in [From, To); To = 0 is permanent.
type Fault struct {
	Upstream int
	Kind     FaultKind
	From, To time.Duration
	Factor   float64       // Slow, SlowDeath
	Ramp     time.Duration // SlowDeath
	// Delay is added to every answer of a Slow upstream, after its
	// service: a broker whose PUBACKs are late by a fixed time as well as
	// Factor times slower.
	Delay time.Duration
}

// answers reports whether an upstream in this mode answers probes and sends
// load reports.
func (f Fault) answers() bool { return f.Kind != FastFail && f.Kind != BlackHole }

// Upstream is one simulated upstream: a FIFO queue in front of Workers workers, each
// request taking a lognormal service time of median Service and shape Sigma.
// Its capacity (Workers, and speed from Service) is what it reports, and
// Workers is its static weight in the table.
//
// An upstream with a JoinAt joins the cluster then: until JoinAt it exists in
// no gateway's table, and at JoinAt every gateway adds it (Table.Add) with
// no statistics, as when the registry announces a new upstream.
type Upstream struct {
	Workers int
	Service time.Duration
	Sigma   float64
	JoinAt  time.Duration // 0: from the start
	// Forward is added to every answer without holding a worker: a
	// clustered broker's follower, which forwards each publish to the
	// stream's leader and waits for its answer (docs/cluster.md,
	// TestPuback: about 0.5 ms on loopback).
	Forward time.Duration
	// Budget, when set, is the most requests a second the upstream takes:
	// each waits its turn, 1/Budget after the previous one's, before its
	// service (a node behind a proxy that passes on a fixed rate and
	// queues the rest, the cluster tier's TestLimit). Capacity and load
	// ignore it.
	Budget float64
}

// Placement makes a scenario one of long-lived connections (MQTT brokers)
// instead of one pick per request: each gateway picks an upstream once, when
// it connects, and sends every message over that connection. When its
// upstream fails fast (FastFail), the connection drops and the gateway
// reconnects, picking again, after a delay drawn uniformly from
// [0, Backoff) (0: at once, the reconnect storm); messages that arrive
// while it is disconnected wait in its buffer and go out on reconnect,
// their latency counted from their arrival.
type Placement struct {
	Backoff time.Duration
}

// Phase multiplies the offered load by Factor in [From, To).
type Phase struct {
	From, To time.Duration
	Factor   float64
}

// Scenario is one simulated situation.
type Scenario struct {
	Name  string // S1, S4c…
	Title string

	Upstreams []Upstream
	Gateways  int
	// RTT returns the round trip from each gateway to each upstream, in ns,
	// drawing from r when it needs randomness.
	RTT func(r *rand.Rand, gateways, upstreams int) [][]int64

	// Load is the offered load, as a fraction of the cluster's capacity
	// (Σ workers / mean service time), split evenly over the gateways as
	// open-loop Poisson arrivals. Phases change it for a while.
	Load   float64
	Phases []Phase

	Duration time.Duration // arrivals stop then
	Warmup   time.Duration // requests arriving before are not measured
	Timeout  time.Duration // the gateway gives up on an attempt
	// Deadline is how long after its arrival a packet may be acknowledged
	// and still count as a success; the run goes on that long after the
	// last arrival. A packet not acknowledged by then counts as the
	// deadline in the percentiles.
	Deadline time.Duration
	// SingleAttempt is the model without retries: a failed attempt (or no
	// upstream to pick) is the packet's failure, counted as the timeout.
	// Without it a failed packet is tried on another upstream and goes
	// back to the buffer, as uplink.Delivery does.
	SingleAttempt bool

	ProbeInterval time.Duration // each gateway probes every upstream
	// PublishProbe makes a probe time what a publish costs (round trip,
	// median service, Forward, a slow upstream's Factor and Delay), as the
	// gateway's MQTT probe does; without it a probe is a TCP connect (the
	// round trip alone).
	PublishProbe bool
	// Fleet adds the fleet's figures to the report: the busiest upstream's
	// share in steady state and during the fault, over the fair share,
	// when the faulty upstream has traffic again, and the swing of the 1 s
	// shares.
	Fleet           bool
	Reports         bool          // upstreams report their load
	RefreshInterval time.Duration // each gateway reads reports this often
	ReportAge       time.Duration // how old a report is when read
	// Jitter spreads the gateways' probe and refresh phases and their
	// start times over StartSpread; without it they all start at 0 and
	// probe and refresh in step.
	Jitter      bool
	StartSpread time.Duration

	Faults []Fault
	// ReconnectSpread, when set, has each gateway see an upstream that
	// failed fast up again 1 s plus a uniform draw in [0, ReconnectSpread)
	// after it recovers (each client's reconnect backoff); without it
	// every gateway sees it up 1 s after.
	ReconnectSpread time.Duration
	Faulty          int // the upstream whose share is reported (the joining one in S7); -1 for none

	// Placement, when set, makes the gateways hold one connection each
	// (see [Placement]); nil is one pick per request.
	Placement *Placement
}

// hasFault reports whether any of the scenario's faults is of kind k.
func (sc *Scenario) hasFault(k FaultKind) bool {
	for _, f := range sc.Faults {
		if f.Kind == k {
			return true
		}
	}
	return false
}

// baseService is the median service time of a standard upstream.
const baseService = 20 * time.Millisecond

// capacity is the capacity of the upstreams present from the start,
// requests per second: upstreams that join later add to it.
func (sc *Scenario) capacity() float64 {
	var c float64
	for _, s := range sc.Upstreams {
		if s.JoinAt == 0 {
			c += s.capacity()
		}
	}
	return c
}

// capacity is an upstream's capacity, requests per second.
func (s Upstream) capacity() float64 {
	mean := float64(s.Service) * math.Exp(s.Sigma*s.Sigma/2) / 1e9
	return float64(s.Workers) / mean
}

func (sc *Scenario) validate() error {
	switch {
	case len(sc.Upstreams) == 0 || len(sc.Upstreams) > selector.MaxUpstreams:
		return fmt.Errorf("lab: scenario %s: %d upstreams, want 1 to %d", sc.Name, len(sc.Upstreams), selector.MaxUpstreams)
	case sc.Gateways <= 0:
		return fmt.Errorf("lab: scenario %s: no gateways", sc.Name)
	case sc.Load <= 0 || sc.Duration <= sc.Warmup || sc.Timeout <= 0 || sc.ProbeInterval <= 0:
		return fmt.Errorf("lab: scenario %s: load, duration, timeout and probe interval must be positive, warmup below duration", sc.Name)
	case sc.Deadline < sc.Timeout:
		return fmt.Errorf("lab: scenario %s: deadline %v below the timeout %v", sc.Name, sc.Deadline, sc.Timeout)
	case sc.Reports && sc.RefreshInterval <= 0:
		return fmt.Errorf("lab: scenario %s: reports need a refresh interval", sc.Name)
	case sc.RTT == nil:
		return errors.New("lab: scenario " + sc.Name + ": no RTT")
	}
	var join time.Duration
	for _, s := range sc.Upstreams {
		if s.Workers <= 0 || s.Service <= 0 {
			return fmt.Errorf("lab: scenario %s: an upstream needs workers and a service time", sc.Name)
		}
		// Tables give indexes in order of Add: joining upstreams come last,
		// in the order they join, so that table index = upstream index.
		if s.JoinAt < join || (s.JoinAt > 0 && s.JoinAt >= sc.Duration) {
			return fmt.Errorf("lab: scenario %s: joining upstreams must come last, in order, and join within the run", sc.Name)
		}
		join = s.JoinAt
	}
	if sc.Upstreams[0].JoinAt > 0 {
		return fmt.Errorf("lab: scenario %s: the first upstream must be there from the start", sc.Name)
	}
	if sc.Faulty >= len(sc.Upstreams) {
		return fmt.Errorf("lab: scenario %s: faulty upstream %d of %d", sc.Name, sc.Faulty, len(sc.Upstreams))
	}
	return nil
}

// uniformRTT draws each pair's round trip uniformly in [lo, hi).
func uniformRTT(lo, hi time.Duration) func(*rand.Rand, int, int) [][]int64 {
	return func(r *rand.Rand, ng, nu int) [][]int64 {
		m := make([][]int64, ng)
		for g := range m {
			m[g] = make([]int64, nu)
			for i := range m[g] {
				m[g][i] = int64(lo) + int64(r.Float64()*float64(hi-lo))
			}
		}
		return m
	}
}

// twoSites puts half the gateways near the first half of the upstreams
// (near) and far from the rest (far), and the other half the other way,
// each pair ±20%.
func twoSites(near, far time.Duration) func(*rand.Rand, int, int) [][]int64 {
	return func(r *rand.Rand, ng, nu int) [][]int64 {
		m := make([][]int64, ng)
		for g := range m {
			m[g] = make([]int64, nu)
			for i := range m[g] {
				d := near
				if (g < ng/2) != (i < nu/2) {
					d = far
				}
				m[g][i] = int64(float64(d) * (0.8 + 0.4*r.Float64()))
			}
		}
		return m
	}
}

// equal returns n standard upstreams.
func equal(n int) []Upstream {
	s := make([]Upstream, n)
	for i := range s {
		s[i] = Upstream{Workers: 4, Service: baseService, Sigma: 0.5}
	}
	return s
}

// nWorkers returns n upstreams of w workers each.
func nWorkers(n, w int) []Upstream {
	s := equal(n)
	for i := range s {
		s[i].Workers = w
	}
	return s
}

// varied returns n upstreams of 8, 4, 2 and 1 workers in turn, with median
// service times of 10, 20 and 40 ms in turn: every pairing of size and
// speed in 12 upstreams, from 8 workers at 10 ms to 1 at 40 ms, 32 times
// less capacity.
func varied(n int) []Upstream {
	ws := []int{8, 4, 2, 1}
	ts := []time.Duration{baseService / 2, baseService, 2 * baseService}
	s := make([]Upstream, n)
	for i := range s {
		s[i] = Upstream{Workers: ws[i%len(ws)], Service: ts[i%len(ts)], Sigma: 0.5}
	}
	return s
}

// mixed returns 8 upstreams of capacities 8, 8, 4, 4, 2, 2, 1 and 1 workers,
// interleaved so that each half of the cluster holds one of each.
func mixed() []Upstream {
	ws := []int{8, 4, 2, 1, 8, 4, 2, 1}
	s := make([]Upstream, len(ws))
	for i, w := range ws {
		s[i] = Upstream{Workers: w, Service: baseService, Sigma: 0.5}
	}
	return s
}

// base is the common part of every scenario: 10 gateways, a 10 s timeout
// (an HTTP upstream's default for one post), a 30 s deadline, probes every
// 5 s, load reports read every second, 1 s old, jittered phases, 60 s with
// 10 s of warm-up.
func base(name, title string) Scenario {
	return Scenario{
		Name: name, Title: title,
		Upstreams: equal(8), Gateways: 10, RTT: uniformRTT(2*time.Millisecond, 10*time.Millisecond),
		Load: 0.6, Duration: 60 * time.Second, Warmup: 10 * time.Second, Timeout: 10 * time.Second, Deadline: 30 * time.Second,
		ProbeInterval: 5 * time.Second, Reports: true, RefreshInterval: time.Second, ReportAge: time.Second,
		Jitter: true, StartSpread: 0, Faulty: -1,
	}
}

// Scenarios returns every scenario, in report order.
func Scenarios() []Scenario {
	var out []Scenario

	s := base("S1", "heterogeneous capacity (8, 4, 2, 1 workers ×2) and RTT (two sites, 2 ms near, 80 ms far), 60% load")
	s.Upstreams, s.RTT = mixed(), twoSites(2*time.Millisecond, 80*time.Millisecond)
	out = append(out, s)

	s = base("S2", "one slow node: upstream 2 at 100× (2 s median) from 15 s to 45 s, 50% load (Buoyant/Finagle slowmiddle)")
	s.Load = 0.5
	s.Faults, s.Faulty = []Fault{{Upstream: 2, Kind: Slow, Factor: 100, From: 15 * time.Second, To: 45 * time.Second}}, 2
	out = append(out, s)

	for _, p := range []time.Duration{10 * time.Second, 30 * time.Second} {
		s = base(fmt.Sprintf("S3%c", 'a'+rune(len(out)-2)), fmt.Sprintf("flapping node: upstream 2 down (fast failure) %v, up %v, from 10 s; 90 s", p, p))
		s.Duration = 90 * time.Second
		for t := 10 * time.Second; t < s.Duration; t += 2 * p {
			s.Faults = append(s.Faults, Fault{Upstream: 2, Kind: FastFail, From: t, To: t + p})
		}
		s.Faulty = 2
		out = append(out, s)
	}

	outages := []struct {
		kind  FaultKind
		to    time.Duration
		title string
	}{
		{FastFail, 45 * time.Second, "fast failure, temporary (15–45 s)"},
		{FastFail, 0, "fast failure, permanent (from 15 s)"},
		{BlackHole, 45 * time.Second, "black hole, temporary (15–45 s)"},
		{BlackHole, 0, "black hole, permanent (from 15 s)"},
		{SlowDeath, 45 * time.Second, "slow death, temporary (service ×1→×50 over 15–35 s, then ×50 until 45 s)"},
		{SlowDeath, 0, "slow death, permanent (×1→×50 over 15–35 s, then black hole)"},
	}
	for k, o := range outages {
		s = base(fmt.Sprintf("S4%c", 'a'+rune(k)), "outage of upstream 2: "+o.title)
		f := Fault{Upstream: 2, Kind: o.kind, From: 15 * time.Second, To: o.to, Factor: 50, Ramp: 20 * time.Second}
		s.Faults, s.Faulty = []Fault{f}, 2
		if o.kind == SlowDeath && o.to == 0 {
			s.Faults[0].To = 35 * time.Second
			s.Faults = append(s.Faults, Fault{Upstream: 2, Kind: BlackHole, From: 35 * time.Second})
		}
		out = append(out, s)
	}

	s = base("S5", "load spike: 50% → 90% (20–40 s) → 50%")
	s.Load = 0.5
	s.Phases = []Phase{{From: 20 * time.Second, To: 40 * time.Second, Factor: 1.8}}
	out = append(out, s)

	s6 := []struct {
		gws    int
		jitter bool
		age    time.Duration
	}{
		{50, false, time.Second}, {50, true, time.Second},
		{500, false, time.Second}, {500, true, time.Second},
		{500, false, 0}, {500, false, 10 * time.Second}, {500, false, 60 * time.Second},
	}
	for k, v := range s6 {
		refresh := "synchronised"
		if v.jitter {
			refresh = "jittered"
		}
		s = base(fmt.Sprintf("S6%c", 'a'+rune(k)),
			fmt.Sprintf("%d gateways sharing the heterogeneous cluster of S1 (RTT 2–10 ms), %s refresh, reports %v old, 70%% load", v.gws, refresh, v.age))
		s.Upstreams, s.Gateways, s.Load = mixed(), v.gws, 0.7
		s.Jitter, s.ReportAge = v.jitter, v.age
		// 35 s runs, 15 s of warm-up: cswlc's cuckoo search on each of 500
		// gateways every second is most of the lab's time.
		s.Duration, s.Warmup = 35*time.Second, 15*time.Second
		if v.jitter {
			s.StartSpread = 15 * time.Second
		}
		out = append(out, s)
	}

	s = base("S7", "a node joining cold: upstream 8 (4 workers, like the others) added to every gateway's table at 20 s with no statistics; 20 gateways, 70% of the first eight's capacity")
	s.Upstreams = append(equal(8), Upstream{Workers: 4, Service: baseService, Sigma: 0.5, JoinAt: 20 * time.Second})
	s.Gateways, s.Load, s.Faulty = 20, 0.7, 8
	out = append(out, s)

	for k, backoff := range []time.Duration{0, 10 * time.Second} {
		how := "all at once (no backoff)"
		if backoff > 0 {
			how = fmt.Sprintf("after a jittered backoff, uniform in [0 s, %.0f s)", backoff.Seconds())
		}
		s = base(fmt.Sprintf("S8%c", 'a'+rune(k)),
			"MQTT placement: 1,000 gateways each connect to one broker of the S1 cluster (8, 4, 2, 1 workers ×2) over 0–15 s, 50% load; broker 0 (8 workers) dies at 25 s for good and its gateways reconnect "+how+"; 45 s")
		s.Upstreams, s.Gateways, s.Load = mixed(), 1000, 0.5
		s.Duration, s.Warmup, s.StartSpread = 45*time.Second, 20*time.Second, 15*time.Second
		s.Faults = []Fault{{Upstream: 0, Kind: FastFail, From: 25 * time.Second}}
		s.Placement = &Placement{Backoff: backoff}
		out = append(out, s)
	}

	s = base("S9", "high load: 90% on 16 heterogeneous upstreams (1, 2, 4 or 8 workers; median service 10, 20 or 40 ms)")
	s.Upstreams, s.Load = varied(16), 0.9
	out = append(out, s)

	s = base("S10", "low load: 20% on 4 equal upstreams (4 workers each)")
	s.Upstreams, s.Load = equal(4), 0.2
	out = append(out, s)

	s = base("S11", "sinkhole: upstream 2 answers every request with an error at once from 15 s to 45 s, stays up (answers probes) and reports no load; 60% load")
	s.Faults, s.Faulty = []Fault{{Upstream: 2, Kind: Sinkhole, From: 15 * time.Second, To: 45 * time.Second}}, 2
	out = append(out, s)

	s = base("S12", "MQTT at fleet scale: 500 gateways, each connected to all 4 brokers (8 workers each) and picking one per message; broker 0 dies (fast failure) from 20 s to 35 s, and each gateway reconnects to it 1–6 s after it returns; 60% load; 45 s")
	s.Upstreams, s.Gateways = nWorkers(4, 8), 500
	// 45 s with 10 s of warm-up: 500 gateways cost as much as S6's.
	s.Duration, s.StartSpread = 45*time.Second, 10*time.Second
	s.Faults, s.Faulty = []Fault{{Upstream: 0, Kind: FastFail, From: 20 * time.Second, To: 35 * time.Second}}, 0
	s.ReconnectSpread = 5 * time.Second
	out = append(out, s)

	out = append(out, fleetScenarios()...)
	return out
}

// The fleet on a three-node NATS cluster, as the cluster tier's TestFleet
// runs it and TestPuback measured it (docs/cluster.md): 50 gateways at 7
// packets a second each (350 in all, about 3% of the nodes' capacity), each
// connected to every node and picking one per message; loopback round
// trips; a PUBACK takes about 1 ms on the node that leads $MQTT_msgs, and
// a follower adds its forward hop, 0.5 ms; the gateways probe with a
// publish every 10 s; no load reports.
const (
	fleetGateways = 50
	fleetRate     = 7 // packets a second per gateway
)

// natsNodes returns the three nodes: node 0 leads, the others forward.
func natsNodes(forward time.Duration) []Upstream {
	s := make([]Upstream, 3)
	for i := range s {
		s[i] = Upstream{Workers: 4, Service: time.Millisecond, Sigma: 0.5}
		if i > 0 {
			s[i].Forward = forward
		}
	}
	return s
}

// natsFleet is a fleet of n gateways at fleetRate on the three nodes of
// natsNodes, their workers grown with the fleet (4 per 50 gateways), as
// the cluster tier runs it (see fleetScenarios).
func natsFleet(name, title string, n int, forward time.Duration) Scenario {
	s := base(name, title)
	s.Upstreams, s.Gateways = natsNodes(forward), n
	for i := range s.Upstreams {
		s.Upstreams[i].Workers = max(1, s.Upstreams[i].Workers*n/fleetGateways)
	}
	s.Load = float64(n*fleetRate) / s.capacity()
	s.RTT = uniformRTT(50*time.Microsecond, 200*time.Microsecond)
	s.ProbeInterval, s.PublishProbe, s.Reports = 10*time.Second, true, false
	s.StartSpread, s.Fleet = 5*time.Second, true
	return s
}

// fleetReconnectSpread is the spread of S13's reconnections after the
// restarted node returns, past the 1 s every gateway waits: the uplink's
// prober connects every second to a broker that is down, so the fleet is
// back within a second of it (S15c and S15d at scale).
const fleetReconnectSpread = time.Second

// fleetScenarios are S13a to S13c.
func fleetScenarios() []Scenario {
	fleet := func(name, title string, forward time.Duration) Scenario {
		return natsFleet(name, title, fleetGateways, forward)
	}
	var out []Scenario
	s := fleet("S13a", "fleet on a NATS cluster: 50 gateways at 7 packets/s each on three nodes, node 0 leads the stream (PUBACK ~1 ms), nodes 1 and 2 forward to it (+0.5 ms); node 2 killed from 20 s to 35 s, each gateway reconnects to it 1–2 s after it returns", 500*time.Microsecond)
	s.Faults, s.Faulty, s.ReconnectSpread = []Fault{{Upstream: 2, Kind: FastFail, From: 20 * time.Second, To: 35 * time.Second}}, 2, fleetReconnectSpread
	out = append(out, s)
	s = fleet("S13b", "fleet on independent brokers that answer alike: S13a without the forward hop", 0)
	s.Faults, s.Faulty, s.ReconnectSpread = []Fault{{Upstream: 2, Kind: FastFail, From: 20 * time.Second, To: 35 * time.Second}}, 2, fleetReconnectSpread
	out = append(out, s)
	s = fleet("S13c", "fleet on the NATS cluster of S13a, follower 1 truly slow from 20 s to 35 s: its PUBACKs 4× slower and 100 ms later", 500*time.Microsecond)
	s.Faults, s.Faulty = []Fault{{Upstream: 1, Kind: Slow, Factor: 4, Delay: 100 * time.Millisecond, From: 20 * time.Second, To: 35 * time.Second}}, 1
	out = append(out, s)
	return out
}

// DefaultStrategies is every strategy of the selector package, and the
// two that the uplink would most likely run behind the outlier layer, in
// report order: a new strategy is one more line of defaultStrategies.
func DefaultStrategies() []string { return slices.Clone(defaultStrategies) }

var defaultStrategies = []string{
	"round_robin",
	"weighted_round_robin",
	"random",
	"least_conn",
	"p2c_ewma",
	"ribbon_wrt",
	"drf",
	"drf/5s",
	"soa",
	"cswlc",
	"irlb",
	"load_aware",
	"least_conn+outlier",
	"p2c_ewma+outlier",
	"prequal",
	"drf_cswlc",
}
