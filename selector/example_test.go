package selector_test

import (
	"fmt"
	"time"

	"fieldlink/selector"
)

// A strategy picks among the upstreams of a Table, which the uplink keeps
// up to date around every delivery; here the default strategy, on three
// brokers of which one is down.
func ExampleNew() {
	t := selector.NewTable(selector.Options{Seed: 1})
	for _, name := range []string{"mqtt://broker-1:1883", "mqtt://broker-2:1883", "mqtt://broker-3:1883"} {
		i, _ := t.Add(name, 1)
		t.SetUp(i, true)
		t.Probe(i, time.Duration(5*(i+1))*time.Millisecond, nil)
	}
	t.SetUp(1, false) // broker-2's connection is lost: never picked
	s, err := selector.New("drf_cswlc", selector.StrategyOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	picked := map[int]bool{}
	for range 100 {
		i, ok := s.Pick(t, 0)
		if !ok {
			break
		}
		tk := t.Begin(i) // the delivery starts ...
		t.End(tk, nil)   // ... and its acknowledgement came
		picked[i] = true
	}
	fmt.Println("broker-2 picked:", picked[1])
	_, ok := s.Pick(t, 1<<0|1<<2) // the delivery tried broker-1 and broker-3 already
	fmt.Println("another pick:", ok)
	// Output:
	// broker-2 picked: false
	// another pick: false
}
