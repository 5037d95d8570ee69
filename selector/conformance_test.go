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

// paperStrategies are the strategies of docs/algorithms.md § 000, 001 and 004,
// and the outlier layer over some of them, by name; each call returns a
// fresh one.
var paperStrategies = []struct {
	name string
	mk   func() selector.Strategy
}{
	{"drf", func() selector.Strategy { return mustNew("drf", selector.StrategyOptions{}) }},
	{"drf/delphi", func() selector.Strategy {
		return mustNew("drf", selector.StrategyOptions{DRF: &selector.DRFOptions{
			TR: selector.DRFFactors{Failures: 10, InFlight: 100, ConsecutiveFailures: 10, ResponseTimeStdDev: 200, Latency: 400},
			N:  selector.DRFFactors{Failures: 1, InFlight: 5, ConsecutiveFailures: 1, ResponseTimeStdDev: 40, Latency: 20},
		}})
	}},
	{"drf/windowed", func() selector.Strategy {
		return mustNew("drf", selector.StrategyOptions{DRF: &selector.DRFOptions{ResponseTime: selector.DRFWindowed}})
	}},
	{"soa", func() selector.Strategy { return mustNew("soa", selector.StrategyOptions{}) }},
	{"load_aware", func() selector.Strategy { return mustNew("load_aware", selector.StrategyOptions{}) }},
	{"p2c_ewma+outlier", func() selector.Strategy { return mustNew("p2c_ewma+outlier", selector.StrategyOptions{}) }},
	{"round_robin+outlier", func() selector.Strategy { return mustNew("round_robin+outlier", selector.StrategyOptions{}) }},
	{"least_conn+outlier", func() selector.Strategy { return mustNew("least_conn+outlier", selector.StrategyOptions{}) }},
	{"drf+outlier", func() selector.Strategy { return mustNew("drf+outlier", selector.StrategyOptions{}) }},
	{"soa+outlier", func() selector.Strategy { return mustNew("soa+outlier", selector.StrategyOptions{}) }},
	{"load_aware+outlier", func() selector.Strategy { return mustNew("load_aware+outlier", selector.StrategyOptions{}) }},
	// § 002 and 003 (cswlc, irlb): with no fresh load report they pick
	// as least_conn, so the suite's reports (script, Concurrent) exercise
	// both paths.
	{"cswlc", func() selector.Strategy { return mustNew("cswlc", selector.StrategyOptions{}) }},
	{"cswlc/one-per-bucket", func() selector.Strategy {
		return selector.NewCSWLC(selector.CSWLCOptions{Tolerance: -1, Seed: 9, Thresholds: []float64{0.3, 0.6}})
	}},
	{"irlb", func() selector.Strategy { return mustNew("irlb", selector.StrategyOptions{}) }},
	// The Prequal anchor, with Q_RIF at 0 (RIF first) and a pool smaller
	// than the suite's 16 and 64 upstreams, so that eviction runs.
	{"prequal/rif-only", func() selector.Strategy {
		return selector.NewPrequal(selector.PrequalOptions{QRIF: -1, Pool: 4})
	}},
	// Ejecting at the first failure, so that the suite runs with ejections.
	{"p2c_ewma+outlier/eager", func() selector.Strategy {
		return mustNew("p2c_ewma+outlier", selector.StrategyOptions{Outlier: selector.OutlierOptions{Consecutive: 1, MaxEjectionPercent: 50}})
	}},
}

func mustNew(name string, opt selector.StrategyOptions) selector.Strategy {
	s, err := selector.New(name, opt)
	if err != nil {
		panic(err)
	}
	return s
}

// TestConformancePapers runs the conformance suite against the papers'
// strategies and the outlier layer.
func TestConformancePapers(t *testing.T) {
	for _, s := range paperStrategies {
		t.Run(s.name, func(t *testing.T) { selectortest.Run(t, s.mk) })
	}
}
