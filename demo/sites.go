package demo

import (
	"context"
	_ "embed"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
)

// The demo's two sites; {{ADDR}} stands for the emulator's address,
// {{BROKER1}}…{{BROKER3}} for the brokers' and {{DIR}} for the run's
// temporary directory.
var (
	//go:embed demo-farm.yaml
	demoFarmSite string
	//go:embed demo-mine.yaml
	demoMineSite string
)

// demoDevice is an emulated slave of the demo and how it misbehaves.
type demoDevice struct {
	slave   byte
	profile string
	faults  emulator.Faults
	spike   float64 // > 0: gas spikes this often per minute, to show alarms
}

var (
	demoFarm = []demoDevice{
		{1, "renke-rs-ws-n01", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{2, "generic-wind-speed", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{3, "renke-rs-fxjt-n01", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{4, "generic-tipping-bucket-rain", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{5, "sensecap-s-soil-mtec-02", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{6, "dfrobot-sen0644", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{7, "generic-irrigation-valve", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
	}
	demoMine = []demoDevice{
		{1, "generic-mine-methane", emulator.Faults{Turnaround: 10 * time.Millisecond}, 1},
		// A flaky CO sensor: a quarter of its replies never come.
		{2, "jxct-jxbs-3001-co", emulator.Faults{Drop: 0.25, Turnaround: 10 * time.Millisecond}, 0},
		{3, "generic-mine-oxygen", emulator.Faults{Turnaround: 10 * time.Millisecond}, 0},
		// A corroded connector: some replies arrive with a bad CRC.
		{4, "generic-mine-h2s", emulator.Faults{BadCRC: 0.1, Turnaround: 10 * time.Millisecond}, 0},
		{5, "generic-mine-wind-speed", emulator.Faults{Turnaround: 10 * time.Millisecond}, 0},
	}
)

// startEmulator serves devs on a loopback port and returns its address.
func startEmulator(ctx context.Context, wg *sync.WaitGroup, set profile.Set, devs []demoDevice, rtu bool, seed int64) (string, error) {
	var eds []emulator.Device
	for _, d := range devs {
		p, ok := set[d.profile]
		if !ok {
			return "", fmt.Errorf("demo: profile %s missing", d.profile)
		}
		if d.spike > 0 {
			p = withSpike(p, d.spike)
		}
		eds = append(eds, emulator.Device{Slave: d.slave, Profile: p, Faults: d.faults})
	}
	emu, err := emulator.New(eds, emulator.Options{Seed: seed})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	wg.Go(func() {
		if rtu {
			_ = emu.ServeRTUOverTCP(ctx, ln)
		} else {
			_ = emu.ServeTCP(ctx, ln)
		}
	})
	return ln.Addr().String(), nil
}

// withSpike returns a copy of p whose gas readings spike often.
func withSpike(p *profile.Profile, spike float64) *profile.Profile {
	c := *p
	c.Registers = slices.Clone(p.Registers)
	for i := range c.Registers {
		if e := c.Registers[i].Emulate; e != nil && e.Model == "drift" {
			e2 := *e
			e2.Spike = spike
			c.Registers[i].Emulate = &e2
		}
	}
	return &c
}
