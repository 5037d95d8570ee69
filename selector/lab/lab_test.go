package lab

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestEventQueueOrdersByTime(t *testing.T) {
	var q eventQueue
	r := rand.New(rand.NewPCG(1, 2))
	for k := range 1000 {
		q.push(event{at: int64(r.IntN(100)), a: int32(k)})
	}
	last := event{at: -1}
	for q.len() > 0 {
		e := q.pop()
		if e.at < last.at || (e.at == last.at && e.seq < last.seq) {
			t.Fatalf("event at %d seq %d after %d seq %d", e.at, e.seq, last.at, last.seq)
		}
		last = e
	}
}

func TestBootstrapContainsMean(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		xs := make([]float64, 20)
		for i := range xs {
			xs[i] = r.NormFloat64()*3 + 10
		}
		e := Bootstrap(xs)
		if !(e.Lo <= e.Mean && e.Mean <= e.Hi) || e.Lo == e.Hi {
			t.Fatalf("CI [%v, %v] around mean %v", e.Lo, e.Hi, e.Mean)
		}
		if math.Abs(e.Mean-meanOf(xs)) > 1e-12 {
			t.Fatalf("mean %v, want %v", e.Mean, meanOf(xs))
		}
	}
	if e := Bootstrap([]float64{math.NaN()}); !math.IsNaN(e.Mean) {
		t.Fatalf("all NaN: %v", e)
	}
}

// short cuts a scenario down for tests: 30 s, faults and joins at 10 s,
// temporary faults until 25 s, at most 100 gateways starting within 5 s.
func short(sc Scenario) Scenario {
	sc.Duration, sc.Warmup = 30*time.Second, 5*time.Second
	sc.Gateways, sc.StartSpread = min(sc.Gateways, 100), min(sc.StartSpread, 5*time.Second)
	for i := range sc.Faults {
		sc.Faults[i].From = 10 * time.Second
		if sc.Faults[i].To > 0 {
			sc.Faults[i].To = 25 * time.Second
		}
	}
	sc.Upstreams = append([]Upstream(nil), sc.Upstreams...)
	for i := range sc.Upstreams {
		if sc.Upstreams[i].JoinAt > 0 {
			sc.Upstreams[i].JoinAt = 10 * time.Second
		}
	}
	return sc
}

// scenario returns the named scenario, shortened.
func scenario(t *testing.T, name string) Scenario {
	t.Helper()
	scs, err := Select([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	return short(scs[0])
}

func TestSettle(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		share    []float64
		from, to int
		target   float64
		want     float64
	}{
		{[]float64{.12, .12, 0, 0, 0, 0, 0, 0}, 2, 8, 0, 0},
		{[]float64{.12, .12, .1, .05, .02, 0, .01, .02, 0, .03}, 2, 10, 0, 2},
		{[]float64{.12, .12, .1, .05, .02, 0, .01, .02, 0, .03}, 2, 8, 0, inf},             // 4 bins in band before to
		{[]float64{0, 0, .1, 0, 0, .1, 0, 0, 0, 0, 0, .1}, 0, 12, 0, 6},                    // swings restart the count
		{[]float64{.3, .2, .14, .1, .11, .125, .13, .12, .15, .16}, 0, 10, .125, 2},        // towards a non-zero share
		{[]float64{.3, .2, .14, .1, .11, .125, .13, .12, .15, .16}, 0, 10, .125 + .2, inf}, // never
	} {
		if got := settle(c.share, c.from, c.to, c.target); got != c.want {
			t.Errorf("settle(%v, %d, %d, %v) = %v, want %v", c.share, c.from, c.to, c.target, got, c.want)
		}
	}
}

func TestOutagesMergeBackToBack(t *testing.T) {
	sc := Scenario{Faulty: 2, Faults: []Fault{
		{Upstream: 2, From: 15 * time.Second, To: 35 * time.Second},
		{Upstream: 2, From: 35 * time.Second},
		{Upstream: 1, From: 40 * time.Second, To: 50 * time.Second},
	}}
	got := sc.outages()
	if len(got) != 1 || got[0] != (outage{15 * time.Second, 0}) {
		t.Fatalf("outages %v, want one from 15 s to the end", got)
	}
}

func TestColdJoin(t *testing.T) {
	sc := scenario(t, "S7")
	j := int(sc.Upstreams[sc.Faulty].JoinAt / time.Second)
	for _, st := range []string{"round_robin", "least_conn"} {
		tr, err := Simulate(sc, st, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: first use %vs, peak %.2f, settle %vs, p99 after join %.3fs", st, tr.JoinRamp, tr.JoinPeak, tr.JoinSettle, tr.JoinP99)
		for k, x := range tr.Share[:j] {
			if x != 0 {
				t.Fatalf("%s: the joining upstream got %.3f of second %d, before it joined", st, x, k)
			}
		}
		if math.IsInf(tr.JoinRamp, 1) || math.IsNaN(tr.JoinP99) || tr.Success < 0.99 {
			t.Errorf("%s: never used the joining upstream, or no p99 after the join (%v), or failed (%v)", st, tr.JoinP99, tr.Success)
		}
		// A round robin gives the newcomer its turn at once, no more.
		if st == "round_robin" && (tr.JoinPeak < 0.8 || tr.JoinPeak > 1.2 || tr.JoinRamp != 0) {
			t.Errorf("round_robin: peak %.2f of the capacity share, first use after %vs; want about 1, at once", tr.JoinPeak, tr.JoinRamp)
		}
	}
}

func TestPlacement(t *testing.T) {
	// Round robin starts at index 0 on every gateway: with one pick per
	// connection, every gateway lands on broker 0, then, when it dies, on
	// broker 1, which cannot serve them all.
	sc := scenario(t, "S8a")
	rr, err := Simulate(sc, "round_robin", 1)
	if err != nil {
		t.Fatal(err)
	}
	n := float64(len(sc.Upstreams))
	if rr.PlaceBefore != n || rr.PlaceMax != n-1 || rr.Overloaded != sc.Gateways || !math.IsInf(rr.Balanced, 1) {
		t.Errorf("round_robin: max/mean before %v after %v, %d overloaded, balanced %v; want %v, %v, %d, never",
			rr.PlaceBefore, rr.PlaceMax, rr.Overloaded, rr.Balanced, n, n-1, sc.Gateways)
	}
	if rr.Reconnect > 0.1 {
		t.Errorf("round_robin: reconnected after %vs with no backoff", rr.Reconnect)
	}
	// With a jittered backoff, the reconnections spread over it.
	sc = scenario(t, "S8b")
	for _, st := range []string{"random", "load_aware"} {
		tr, err := Simulate(sc, st, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: max/mean before %.2f after %.2f, Jain %.3f, reconnected %.1fs, %d overloaded, p99 %.3fs", st, tr.PlaceBefore, tr.PlaceMax, tr.PlaceJain, tr.Reconnect, tr.Overloaded, tr.P99)
		if b := sc.Placement.Backoff.Seconds(); !(tr.Reconnect > b/2 && tr.Reconnect <= b+0.1) {
			t.Errorf("%s: last reconnection %vs after the failure, want within the %vs backoff, near its end", st, tr.Reconnect, b)
		}
		if !(tr.PlaceJain > 0 && tr.PlaceJain <= 1) || !(tr.PlaceMax >= 1) {
			t.Errorf("%s: Jain %v, max/mean %v", st, tr.PlaceJain, tr.PlaceMax)
		}
	}
}

func TestSlowNode(t *testing.T) {
	scs, err := Select([]string{"S2"})
	if err != nil {
		t.Fatal(err)
	}
	sc := short(scs[0])
	rr, err := Simulate(sc, "round_robin", 1)
	if err != nil {
		t.Fatal(err)
	}
	p2c, err := Simulate(sc, "p2c_ewma", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("round_robin p99 %.3fs share %.3f; p2c_ewma p99 %.3fs share %.3f", rr.P99, rr.FaultyShare, p2c.P99, p2c.FaultyShare)
	if p2c.P99 >= rr.P99 {
		t.Errorf("p2c_ewma p99 %v not below round_robin's %v", p2c.P99, rr.P99)
	}
	// Without retries, nothing rests a slow upstream: a blind strategy
	// keeps sending it its share.
	sc.SingleAttempt = true
	rr, err = Simulate(sc, "round_robin", 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := float64(len(sc.Upstreams)); math.Abs(rr.FaultyShare-1/n) > 0.01 {
		t.Errorf("round_robin sent %.3f to the slow node with one attempt, want about %.3f", rr.FaultyShare, 1/n)
	}
}

func TestDeterministic(t *testing.T) {
	cfg := Config{Scenarios: []string{"S2", "S4c", "S7", "S8b"}, Strategies: []string{"round_robin", "p2c_ewma+outlier", "load_aware"}, Seeds: 2, adjust: func(sc Scenario) Scenario {
		// 15 s, faults from 5 s to 10 s, a join at 5 s, 10 gateways (30
		// for placement), as this test runs twice, under -race in CI.
		sc = short(sc)
		sc.Duration, sc.Gateways = 15*time.Second, min(sc.Gateways, 10)
		if sc.Placement != nil {
			sc.Gateways = 30
		}
		for i := range sc.Faults {
			sc.Faults[i].From = 5 * time.Second
			if sc.Faults[i].To > 0 {
				sc.Faults[i].To = 10 * time.Second
			}
		}
		for i := range sc.Upstreams {
			if sc.Upstreams[i].JoinAt > 0 {
				sc.Upstreams[i].JoinAt = 5 * time.Second
			}
		}
		return sc
	}}
	render := func(par int) ([]byte, map[string][]byte) {
		c := cfg
		c.Parallel = par
		rep, err := Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Markdown("lab"), rep.SVGs()
	}
	a, sa := render(1)
	b, sb := render(2)
	if !bytes.Equal(a, b) {
		t.Fatal("two runs with the same seeds gave different reports")
	}
	if len(sa) == 0 || len(sa) != len(sb) {
		t.Fatalf("charts: %d and %d", len(sa), len(sb))
	}
	for k, v := range sa {
		if !bytes.Equal(v, sb[k]) {
			t.Fatalf("chart %s differs", k)
		}
	}
	for _, want := range []string{"### S2", "### S7", "### S8b", "settle after fault", "landed overloaded", "share-s7.svg"} {
		if !bytes.Contains(a, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !bytes.Contains(a, []byte("Default selector")) && !bytes.Contains(a, []byte("No strategy")) {
		t.Fatalf("report lacks its sections:\n%s", a)
	}
}

func TestScenariosValid(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range Scenarios() {
		if err := sc.validate(); err != nil {
			t.Error(err)
		}
		if seen[sc.Name] {
			t.Errorf("scenario %s twice", sc.Name)
		}
		seen[sc.Name] = true
	}
	for _, s := range DefaultStrategies() {
		if _, err := NewStrategy(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := Select([]string{"S99"}); err == nil {
		t.Error("S99 selected something")
	}
	if scs, err := Select([]string{"s4c"}); err != nil || len(scs) != 1 || scs[0].Name != "S4c" {
		t.Errorf("s4c selected %v, %v", scs, err)
	}
	if scs, err := Select([]string{"S1"}); err != nil || len(scs) != 1 || scs[0].Name != "S1" {
		t.Errorf("S1 selected %d scenarios, want S1 alone (not S10…), %v", len(scs), err)
	}
	if scs, err := Select([]string{"S4"}); err != nil || len(scs) != 6 {
		t.Errorf("S4 selected %d scenarios, want S4a to S4f, %v", len(scs), err)
	}
}

func TestRetryOnAnotherUpstream(t *testing.T) {
	// Two upstreams of one worker, a fixed service time of 20 ms and round
	// trips of 4 ms; upstream 0 is a sinkhole from the start. A packet sent
	// to it first gets its error after 4 ms and is sent at once to upstream
	// 1: 4 + 4 + 20 = 28 ms, counted once; a packet sent to upstream 1 first
	// (upstream 0 resting) takes 24 ms.
	const rtt, service = 4 * time.Millisecond, 20 * time.Millisecond
	sc := Scenario{
		Name: "retry", Upstreams: []Upstream{{Workers: 1, Service: service}, {Workers: 1, Service: service}},
		Gateways: 1, RTT: uniformRTT(rtt, rtt), Load: 0.01,
		Duration: 20 * time.Second, Timeout: 10 * time.Second, Deadline: 30 * time.Second, ProbeInterval: 5 * time.Second,
		Faults: []Fault{{Upstream: 0, Kind: Sinkhole}}, Faulty: 0,
	}
	s, err := simulate(sc, "round_robin", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.pkts) < 5 || len(s.lat) != len(s.pkts) || s.ok != len(s.pkts) {
		t.Fatalf("%d packets, %d latencies, %d acknowledged: want each packet counted once, and acknowledged", len(s.pkts), len(s.lat), s.ok)
	}
	retried := 0
	for k, p := range s.pkts {
		want := 2*rtt/2 + service
		if p.attempts == 2 {
			want += rtt
			retried++
		}
		if got := time.Duration(p.end - p.t0); !p.done || got != want || p.attempts > 2 {
			t.Errorf("packet %d: %d attempts, latency %v (done %v), want %v", k, p.attempts, got, p.done, want)
		}
	}
	if retried == 0 {
		t.Fatal("no packet went to the sinkhole first")
	}
	tr := s.result()
	if tr.Retried != float64(retried)/float64(len(s.pkts)) || tr.FirstSuccess >= 1 || tr.Success != 1 {
		t.Errorf("retried %v, first success %v, success %v", tr.Retried, tr.FirstSuccess, tr.Success)
	}
	// Without retries, the same packets fail on the sinkhole.
	sc.SingleAttempt = true
	one, err := Simulate(sc, "round_robin", 1)
	if err != nil {
		t.Fatal(err)
	}
	if one.Requests != len(s.pkts) || one.Success >= 1 || one.Retried != 0 || one.P99 != sc.Timeout.Seconds() {
		t.Errorf("single attempt: %d packets (want %d), success %v, retried %v, p99 %vs (want the timeout)", one.Requests, len(s.pkts), one.Success, one.Retried, one.P99)
	}
}

func TestSinkholeStaysUp(t *testing.T) {
	sc := scenario(t, "S11")
	// One attempt: nothing rests the sinkhole and the table never sees it
	// down, so a round robin keeps sending it its share, and loses it.
	sc.SingleAttempt = true
	one, err := Simulate(sc, "round_robin", 1)
	if err != nil {
		t.Fatal(err)
	}
	n := float64(len(sc.Upstreams))
	if math.Abs(one.FaultyShare-1/n) > 0.01 || one.Success > 1-0.5/n*15/25 {
		t.Errorf("single attempt: sinkhole share %.3f (want about %.3f), success %.4f", one.FaultyShare, 1/n, one.Success)
	}
	// Retries: every packet it failed is delivered elsewhere, and rests
	// keep it to a small share.
	sc.SingleAttempt = false
	tr, err := Simulate(sc, "round_robin", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sinkhole share %.4f, first try %.4f, retried %.4f, p99 %.3fs", tr.FaultyShare, tr.FirstSuccess, tr.Retried, tr.P99)
	if tr.Success != 1 || !(tr.FaultyShare > 0 && tr.FaultyShare < 0.1/n) || !(tr.Retried > 0) || tr.FirstSuccess >= 1 {
		t.Errorf("retries: success %v, sinkhole share %v, retried %v, first try %v", tr.Success, tr.FaultyShare, tr.Retried, tr.FirstSuccess)
	}
}

func TestFleetMQTTShape(t *testing.T) {
	scs, err := Select([]string{"S12"})
	if err != nil {
		t.Fatal(err)
	}
	sc := scs[0]
	if sc.Name != "S12" || sc.Gateways != 500 || sc.Placement != nil || len(sc.Upstreams) != 4 || sc.ReconnectSpread <= 0 {
		t.Fatalf("%s: %d gateways, placement %v, %d brokers, reconnect spread %v; want S12: 500 gateways picking per message over 4 brokers, spread reconnections",
			sc.Name, sc.Gateways, sc.Placement, len(sc.Upstreams), sc.ReconnectSpread)
	}
	if len(sc.Faults) != 1 || sc.Faults[0].Kind != FastFail || sc.Faults[0].To == 0 {
		t.Fatalf("faults %v: want one broker dying and returning", sc.Faults)
	}
}

// fleetTrial runs strategy st in fleet scenario name with seed.
func fleetTrial(t *testing.T, name, st string, seed uint64) Trial {
	t.Helper()
	scs, err := Select([]string{name})
	if err != nil || len(scs) != 1 {
		t.Fatalf("%s: %v", name, err)
	}
	tr, err := Simulate(scs[0], st, seed)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestNATSFleetModel checks S13's cluster: the leader's PUBACKs are the
// fastest (a follower adds its forward hop), and a blind round robin
// spreads the fleet evenly over the nodes, two when one is down.
func TestNATSFleetModel(t *testing.T) {
	scs, err := Select([]string{"S13a"})
	if err != nil {
		t.Fatal(err)
	}
	sc := scs[0]
	if sc.Upstreams[0].Forward != 0 || sc.Upstreams[1].Forward <= 0 || sc.Upstreams[2].Forward <= 0 || !sc.PublishProbe || !sc.Fleet {
		t.Fatalf("S13a: nodes %+v, publish probe %v: want node 0 the leader, the others forwarding, publish probes", sc.Upstreams, sc.PublishProbe)
	}
	s, err := simulate(sc, "round_robin", 1)
	if err != nil {
		t.Fatal(err)
	}
	if lead, fol := s.probeRTT(0, 0, 0), s.probeRTT(0, 1, 0); lead >= fol {
		t.Errorf("the leader's probe %v not below a follower's %v", lead, fol)
	}
	tr := s.result()
	t.Logf("round_robin: busiest %.2f steady, %.2f with node 2 down, back after %v s, swing %.2f", tr.BusiestSteady, tr.BusiestDown, tr.Back, tr.Swing)
	if tr.BusiestSteady > 1.1 || tr.BusiestDown > 1.1 || tr.FaultyShare > 0.01 || tr.Success < 1 {
		t.Errorf("round_robin: busiest %.2f steady, %.2f down, faulty share %.3f, success %v: want about the fair share, nothing to the dead node, every packet", tr.BusiestSteady, tr.BusiestDown, tr.FaultyShare, tr.Success)
	}
}
