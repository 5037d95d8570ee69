package lab

import (
	"fmt"
	"time"
)

// Scenarios past the report's: selected by name only (Select, gateway lab
// -scenarios S14a,S15), not in the default run, since S15b's 10,000
// gateways cost more CPU than the rest of the report.
func extraScenarios() []Scenario {
	return append(limitScenarios(), scaleScenarios()...)
}

// limitBudget is the publishes a second S14a's node 0 passes on: 1.2
// times its fair share of the fleet's 350, as the cluster tier's TestLimit
// gives the stream leader by default.
const limitBudget = 140

// limitScenarios are S14a, the fleet of S13a with the node it is drawn to,
// the stream leader, at its limit, and S14b, every node at it.
func limitScenarios() []Scenario {
	s := natsFleet("S14a", fmt.Sprintf("a node at its limit: the fleet of S13a (350 packets/s) with node 0, the stream leader, passing on at most %d publishes a second and queueing the rest (the cluster tier's TestLimit); no fault", limitBudget), fleetGateways, 500*time.Microsecond)
	s.Upstreams[0].Budget = limitBudget
	s.Faulty = 0
	b := natsFleet("S14b", fmt.Sprintf("every node at its limit: the fleet of S13a (350 packets/s) on three nodes that each pass on at most %d publishes a second (the cluster 420), queueing the rest; no fault", limitBudget), fleetGateways, 500*time.Microsecond)
	for i := range b.Upstreams {
		b.Upstreams[i].Budget = limitBudget
	}
	b.Faulty = 0
	return []Scenario{s, b}
}

// scaleGateways are the fleets of S15.
var scaleGateways = []int{1000, 10000}

// scaleScenarios are S15a to S15d: S13a's restart with 1,000 and 10,000
// gateways, the nodes' workers grown with the fleet so that the load is
// S13a's share of their capacity; in S15a and S15b each gateway reconnects
// 1–11 s after the node returns (probes every 10 s), in S15c and
// S15d within a second of it, as S13a (the uplink's prober, every second while a
// connection is down).
func scaleScenarios() []Scenario {
	var out []Scenario
	for k, spread := range []time.Duration{10 * time.Second, time.Second} {
		for j, n := range scaleGateways {
			name := fmt.Sprintf("S15%c", 'a'+rune(2*k+j))
			s := natsFleet(name, fmt.Sprintf("beyond fifty: S13a with %d gateways (the nodes %d× as large), node 2 killed from 20 s to 35 s, each gateway reconnecting to it 1–%.0f s after it returns", n, n/fleetGateways, (time.Second+spread).Seconds()), n, 500*time.Microsecond)
			s.Faults, s.Faulty, s.ReconnectSpread = []Fault{{Upstream: 2, Kind: FastFail, From: 20 * time.Second, To: 35 * time.Second}}, 2, spread
			out = append(out, s)
		}
	}
	return out
}
