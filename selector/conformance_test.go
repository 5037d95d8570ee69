package selector_test

import (
	"testing"

	"fieldlink/selector"
	"fieldlink/selector/selectortest"
)

// TestConformance runs the conformance suite against every strategy New knows.
func TestConformance(t *testing.T) {
	for _, name := range selector.Names() {
		t.Run(name, func(t *testing.T) {
			selectortest.Run(t, func() selector.Strategy {
				s, err := selector.New(name, selector.StrategyOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}
