package selector

import (
	"fmt"
	"testing"
	"time"
)

// benchTable is a table of n upstreams as the uplink leaves it: the default
// clock (time.Now), weights 1 to 3, latencies between 5 and 20 ms recorded,
// a few deliveries in flight. seed 0 is the production default.
func benchTable(n int, seed uint64) *Table {
	tb := NewTable(Options{Seed: seed})
	now := time.Now()
	for i := range n {
		tb.Add(fmt.Sprintf("u%d", i), 1+i%3)
		u := tb.ups[i].Load()
		for k := range 20 {
			lat := time.Duration(5+(i*7+k)%16) * time.Millisecond
			tb.record(u, now.Add(-lat), now, nil)
		}
		for range i % 4 {
			tb.Begin(i)
		}
	}
	return tb
}

// BenchmarkPick is Pick's cost per strategy at 2, 4 and 16 upstreams.
func BenchmarkPick(b *testing.B) {
	for _, name := range Names() {
		for _, n := range []int{2, 4, 16} {
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				tb, s := benchTable(n, 0), mustNew(b, name)
				s.Pick(tb, 0) // ribbon_wrt computes its weights at the first pick
				b.ReportAllocs()
				for b.Loop() {
					s.Pick(tb, 0)
				}
			})
		}
	}
}

// BenchmarkPickParallel is Pick from GOMAXPROCS goroutines at once, on one
// table and strategy; n=16/seeded uses a fixed seed, whose random stream is
// one atomic counter that every pick of random, least_conn (on a tie),
// p2c_ewma and ribbon_wrt advances.
func BenchmarkPickParallel(b *testing.B) {
	for _, name := range Names() {
		for _, v := range []struct {
			sub  string
			seed uint64
		}{{"n=16", 0}, {"n=16/seeded", 1}} {
			b.Run(name+"/"+v.sub, func(b *testing.B) {
				tb, s := benchTable(16, v.seed), mustNew(b, name)
				s.Pick(tb, 0)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						s.Pick(tb, 0)
					}
				})
			})
		}
	}
}

// BenchmarkBeginEnd is the cost the uplink pays around every delivery.
func BenchmarkBeginEnd(b *testing.B) {
	tb := benchTable(16, 0)
	b.ReportAllocs()
	for b.Loop() {
		tb.End(tb.Begin(3), nil)
	}
}

// benchPapers are the strategies of docs/algorithms.md § 000–004 and the outlier layer, which New does
// not make (yet), for BenchmarkPickPapers. benchTable's upstreams report no
// load, so load_aware is measured on its fallback and load_aware/reported
// with a report from each.
var benchPapers = []struct {
	name   string
	mk     func() Strategy
	report bool
}{
	{"drf", func() Strategy { return newDRF(DRFOptions{}) }, false},
	{"soa", func() Strategy { return newSOA(soaOptions{}) }, false},
	{"load_aware", func() Strategy { return newLoadAware(loadAwareOptions{}) }, false},
	{"load_aware/reported", func() Strategy { return newLoadAware(loadAwareOptions{}) }, true},
	{"cswlc", func() Strategy { return newCSWLC(cswlcOptions{}) }, false},
	{"cswlc/reported", func() Strategy { return newCSWLC(cswlcOptions{}) }, true},
	{"irlb", func() Strategy { return newIRLB(irlbOptions{}) }, false},
	{"irlb/reported", func() Strategy { return newIRLB(irlbOptions{}) }, true},
	{"p2c_ewma+outlier", func() Strategy { return withOutlier(newP2CEWMA(StrategyOptions{}), OutlierOptions{}) }, false},
	{"round_robin+outlier", func() Strategy { return withOutlier(new(roundRobin), OutlierOptions{}) }, false},
}

// BenchmarkPickPapers is BenchmarkPick and BenchmarkPickParallel for
// benchPapers.
func BenchmarkPickPapers(b *testing.B) {
	for _, v := range benchPapers {
		for _, n := range []int{2, 4, 16} {
			b.Run(fmt.Sprintf("%s/n=%d", v.name, n), func(b *testing.B) {
				tb, s := benchTable(n, 0), v.mk()
				if v.report {
					for i := range n {
						tb.Report(i, Load{CPU: float64(i%5) / 5, DiskIO: 0.3, Network: 0.2})
					}
				}
				s.Pick(tb, 0) // the periodic strategies compute at the first pick
				b.ReportAllocs()
				for b.Loop() {
					s.Pick(tb, 0)
				}
			})
		}
		b.Run(v.name+"/parallel/n=16", func(b *testing.B) {
			tb, s := benchTable(16, 0), v.mk()
			if v.report {
				for i := range 16 {
					tb.Report(i, Load{CPU: float64(i%5) / 5, DiskIO: 0.3, Network: 0.2})
				}
			}
			s.Pick(tb, 0)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s.Pick(tb, 0)
				}
			})
		})
	}
}
