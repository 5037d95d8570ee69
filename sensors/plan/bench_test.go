package plan

import (
	"flag"
	"testing"
	"time"

	"fieldlink/sensors/profile"
)

var benchTs = flag.Duration("bench.ts", 10*time.Millisecond, "slave turnaround Ts of the line in BenchmarkPlan")

// BenchmarkPlan reports, for the sensors benchmark's scattered device (20
// registers in 5 blocks of 4, gaps of 6) on a 9600-baud 8E1 line with
// turnaround -bench.ts, the planned wire time as a ratio to the exhaustive
// optimum and to Telegraf's max_insert plan (fill 50), and the request
// counts of each plan.
func BenchmarkPlan(b *testing.B) {
	its := blocks(5, 4, 6, 0)
	cost := Serial(9600, 11, *benchTs)
	lim := Limits{MaxGap: -1}
	var reqs []Request
	for b.Loop() {
		reqs, _ = Plan(its, lim, cost)
	}
	opt, err := exhaustive(its, lim, cost)
	if err != nil {
		b.Fatal(err)
	}
	telegraf := MaxInsert(its, lim, 50)
	contig := contiguous(its, lim)
	b.ReportMetric(float64(cost.Total(reqs))/float64(opt), "plan/optimal")
	b.ReportMetric(float64(cost.Total(reqs))/float64(cost.Total(telegraf)), "plan/telegraf")
	b.ReportMetric(float64(cost.Total(contig))/float64(cost.Total(reqs)), "contiguous/plan")
	// A second map where Telegraf's fixed fill of 50 hurts: blocks 30
	// registers apart on a fast-turnaround line (break-even gap 10).
	var wide []Item
	for k := range 5 {
		for j := range 4 {
			wide = append(wide, Item{Area: profile.Holding, Address: uint16(k*34 + j), Words: 1, Ref: len(wide)})
		}
	}
	fast := Serial(9600, 11, 0)
	wideReqs, _ := Plan(wide, lim, fast)
	b.ReportMetric(float64(fast.Total(wideReqs))/float64(fast.Total(MaxInsert(wide, lim, 50))), "plan/telegraf-gap30")
	b.ReportMetric(float64(len(reqs)), "reqs/device")
	b.ReportMetric(float64(len(contig)), "reqs-contiguous/device")
	b.ReportMetric(float64(len(its)), "reqs-single/device")
}
