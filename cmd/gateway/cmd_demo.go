package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"fieldlink/config"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
)

// The demo's two sites; {{ADDR}} stands for the emulator's address.
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
	}
	demoMine = []demoDevice{
		{1, "generic-mine-methane", emulator.Faults{Turnaround: 10 * time.Millisecond}, 0.5},
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

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("demo", stderr)
	duration := fs.Duration("duration", 20*time.Second, "how long to run; 0 runs until interrupted")
	fs.DurationVar(duration, "for", 20*time.Second, "the same as -duration")
	level := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	set, err := loadProfiles("")
	if err != nil {
		return err
	}
	emuCtx, stopEmu := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stopEmu(); wg.Wait() }()
	farm, err := startEmulator(emuCtx, &wg, set, demoFarm, false, 1)
	if err != nil {
		return err
	}
	mine, err := startEmulator(emuCtx, &wg, set, demoMine, true, 2)
	if err != nil {
		return err
	}
	fixed := func(string) (profile.Set, error) { return set, nil }
	var sites []*site
	defer func() {
		for _, st := range sites {
			st.close()
		}
	}()
	for _, d := range []struct{ name, tmpl, addr string }{{"demo-farm.yaml", demoFarmSite, farm}, {"demo-mine.yaml", demoMineSite, mine}} {
		cfg, err := config.Parse(d.name, []byte(strings.ReplaceAll(d.tmpl, "{{ADDR}}", d.addr)), fixed)
		if err != nil {
			return err
		}
		st, err := openSite(cfg, log)
		if err != nil {
			return err
		}
		sites = append(sites, st)
	}

	fmt.Fprintf(stderr, "fieldlink demo: farm %s (%d devices) on Modbus TCP %s, mine %s (%d devices) on RTU over TCP %s\n",
		sites[0].cfg.Site.ID, sites[0].cfg.DeviceCount(), farm, sites[1].cfg.Site.ID, sites[1].cfg.DeviceCount(), mine)
	fmt.Fprintf(stderr, "live packets follow on stdout (one JSON line each); the mine's CO sensor drops a quarter of its replies, its H2S sensor garbles some\n")
	if *duration > 0 {
		fmt.Fprintf(stderr, "running for %v (-duration 0 runs until Ctrl-C)\n\n", *duration)
	}
	counts := map[string]int{}
	alarms := map[string]int{}
	total := 0
	buf := make([]byte, 0, 1024)
	start := time.Now()
	var mu sync.Mutex
	var running sync.WaitGroup
	for _, st := range sites {
		running.Go(func() {
			st.run(ctx, func(p *packet.Packet) {
				mu.Lock()
				defer mu.Unlock()
				total++
				counts[p.DeviceID]++
				if p.Alarm() {
					alarms[p.DeviceID]++
				}
				buf = append(p.AppendJSON(buf[:0], st.enc), '\n')
				_, _ = stdout.Write(buf)
			})
		})
	}
	running.Wait()
	fmt.Fprintf(stderr, "\n%d packets in %v\n", total, time.Since(start).Round(time.Millisecond))
	tw := tabwriter.NewWriter(stderr, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUS\tDEVICE\tHEALTH\tPOLLS\tERRORS\tPACKETS\tALARMS\tLAST ERROR")
	var statuses []sensors.DeviceStatus
	for _, st := range sites {
		statuses = append(statuses, st.status()...)
	}
	for _, st := range statuses {
		lastErr := st.LastError
		if len(lastErr) > 60 {
			lastErr = "…" + lastErr[len(lastErr)-59:]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", st.Bus, st.Name, st.Health, st.Polls, st.Errors, counts[st.Name], alarms[st.Name], lastErr)
	}
	return tw.Flush()
}
