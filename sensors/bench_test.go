package sensors_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/plan"
	"fieldlink/sensors/profile"
)

var benchTs = flag.Duration("bench.ts", 10*time.Millisecond, "slave turnaround Ts of the emulated devices in BenchmarkPollCycle")

// scattered is the benchmark's device: 20 registers in 5 blocks of 4 with
// gaps of 6 between blocks (addresses 0-3, 10-13, ... 40-43).
func scattered(t testing.TB) *profile.Profile {
	src := "model: bench\ndata_type: Bench\nregisters:\n"
	for b := range 5 {
		for k := range 4 {
			addr := b*10 + k
			src += fmt.Sprintf("  - {name: R%d, area: holding, address: %d, emulate: {model: walk, min: 0, max: 1000}}\n", addr, addr)
		}
	}
	p, err := profile.Parse("bench-scattered", "bench", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkPollCycle polls 10 emulated devices × 20 scattered registers on
// a 9600-baud 8E1 serial line (socat pty pair, the emulator replying with
// wire-accurate timing and turnaround -bench.ts) and reports the poll-cycle
// time divided by the wire-time lower bound of the requests sent,
// Σ[(13+2N)·tc + 2·t3.5 + Ts], once with the planner and once with
// contiguous-only merging, side by side.
func BenchmarkPollCycle(b *testing.B) {
	p := scattered(b)
	var devs []emulator.Device
	var specs []sensors.DeviceSpec
	for i := range 10 {
		devs = append(devs, emulator.Device{Slave: byte(i + 1), Profile: p, Faults: emulator.Faults{Turnaround: *benchTs}})
		specs = append(specs, sensors.DeviceSpec{Name: fmt.Sprintf("d%d", i+1), Slave: byte(i + 1), Profile: p, Interval: time.Hour})
	}
	emu, err := emulator.New(devs, emulator.Options{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	client := open(b, "rtu://"+emutest.ServePty(b, emu, 9600, 'E')+"?baud=9600&parity=E", time.Second)
	cost := plan.Serial(9600, 11, *benchTs)

	for _, mode := range []struct {
		name   string
		maxGap int
	}{{"planned", -1}, {"contiguous", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			bus, err := sensors.NewBus("bench", client, specs, sensors.BusOptions{Cost: cost, MaxGap: mode.maxGap})
			if err != nil {
				b.Fatal(err)
			}
			var bound time.Duration
			nreq := 0
			for _, reqs := range bus.Requests() {
				bound += cost.Total(reqs)
				nreq += len(reqs)
			}
			failed := 0
			start := time.Now()
			cycles := 0
			for b.Loop() {
				bus.PollAll(context.Background(), func(_ *packet.Packet, err error) {
					if err != nil {
						failed++
					}
				})
				cycles++
			}
			elapsed := time.Since(start)
			if failed > 0 {
				b.Fatalf("%d polls failed", failed)
			}
			perCycle := elapsed / time.Duration(cycles)
			b.ReportMetric(float64(perCycle)/float64(bound), "cycle/bound")
			b.ReportMetric(perCycle.Seconds()*1000, "ms/cycle")
			b.ReportMetric(bound.Seconds()*1000, "bound-ms/cycle")
			b.ReportMetric(float64(nreq), "reqs/cycle")
		})
	}
}
