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

// short cuts a scenario down for tests.
func short(sc Scenario) Scenario {
	sc.Duration, sc.Warmup = 30*time.Second, 5*time.Second
	for i := range sc.Faults {
		sc.Faults[i].From, sc.Faults[i].To = 10*time.Second, 25*time.Second
	}
	return sc
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
	if n := float64(len(sc.Servers)); math.Abs(rr.FaultyShare-1/n) > 0.01 {
		t.Errorf("round_robin sent %.3f to the slow node, want about %.3f", rr.FaultyShare, 1/n)
	}
}

func TestDeterministic(t *testing.T) {
	cfg := Config{Scenarios: []string{"S2", "S4c"}, Strategies: []string{"round_robin", "p2c_ewma+outlier", "load_aware"}, Seeds: 2, adjust: func(sc Scenario) Scenario {
		sc = short(sc)
		sc.Duration = 20 * time.Second
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
	if !bytes.Contains(a, []byte("### S2")) || !bytes.Contains(a, []byte("Default selector")) && !bytes.Contains(a, []byte("No strategy")) {
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
	if _, err := Select([]string{"S9"}); err == nil {
		t.Error("S9 selected something")
	}
}
