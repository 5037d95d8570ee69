package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"fieldlink/config"
	"fieldlink/metrics"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/plan"
)

// site is a loaded site: its buses and line sensors, wired to clients.
type site struct {
	cfg     *config.Config
	stamper *packet.Stamper
	buses   []*sensors.Bus
	lines   []*sensors.LineSensor
	clients []*modbus.Client
	enc     packet.Encoding
}

// busCost is the planner's timing model for a bus: wire timing on a serial
// line (and behind an RTU-over-TCP server, whose serial side has the same
// physics), a fixed round trip over Modbus TCP.
func busCost(ep modbus.Endpoint, turnaround time.Duration) plan.Cost {
	if ep.Serial() {
		return plan.Serial(ep.Baud, ep.BitsPerChar(), turnaround)
	}
	// Over TCP a register costs nanoseconds and a request a round trip:
	// fill every gap the limits allow.
	return plan.Cost{CharTime: time.Microsecond / 10, Turnaround: turnaround + time.Millisecond}
}

func openSite(cfg *config.Config, log *slog.Logger) (*site, error) {
	s := &site{cfg: cfg, stamper: &packet.Stamper{
		IDField: cfg.Site.IDField, SiteID: cfg.Site.ID, GatewayID: cfg.Gateway.ID, Loc: cfg.Location,
	}}
	if cfg.Packet.Values == "number" {
		s.enc = packet.Numbers
	}
	for _, b := range cfg.Buses {
		ep, err := modbus.ParseURL(b.URL)
		if err != nil {
			s.close()
			return nil, err
		}
		client, err := modbus.Open(b.URL, modbus.Options{Timeout: b.Timeout, Logger: log.With("bus", b.Name)})
		if err != nil {
			s.close()
			return nil, fmt.Errorf("bus %s: %w", b.Name, err)
		}
		s.clients = append(s.clients, client)
		specs := make([]sensors.DeviceSpec, len(b.Devices))
		for i, d := range b.Devices {
			specs[i] = sensors.DeviceSpec{Name: d.Name, Slave: byte(d.Slave), Profile: cfg.Profiles[d.Profile], Interval: d.Interval, DataType: d.DataType}
		}
		maxGap := -1
		if b.MaxGap != nil {
			maxGap = *b.MaxGap
		}
		bus, err := sensors.NewBus(b.Name, client, specs, sensors.BusOptions{
			Cost: busCost(ep, *b.Turnaround), MaxGap: maxGap, Backoff: b.Backoff, Logger: log,
		})
		if err != nil {
			s.close()
			return nil, err
		}
		s.buses = append(s.buses, bus)
	}
	for _, l := range cfg.SerialSensors {
		sp, err := config.ParseSerialURL(l.URL)
		if err != nil {
			s.close()
			return nil, err
		}
		s.lines = append(s.lines, sensors.NewLineSensor(sensors.LineSpec{
			Name: l.Name, Profile: cfg.Profiles[l.Profile], DataType: l.DataType, Interval: l.Interval,
			Open: sensors.SerialOpener(sp.Path, sp.Baud, sp.Parity, sp.DataBits, sp.StopBits),
		}, log))
	}
	return s, nil
}

func (s *site) close() {
	for _, c := range s.clients {
		_ = c.Close()
	}
}

// pollOnce polls every device once, buses in parallel, and calls emit for
// each packet or device error (serialised).
func (s *site) pollOnce(ctx context.Context, emit func(*packet.Packet, error)) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range s.buses {
		wg.Go(func() {
			b.PollAll(ctx, func(p *packet.Packet, err error) {
				mu.Lock()
				defer mu.Unlock()
				if p != nil {
					s.stamper.Stamp(p)
				}
				emit(p, err)
			})
		})
	}
	for _, l := range s.lines {
		wg.Go(func() {
			p, err := l.ReadOne(ctx)
			mu.Lock()
			defer mu.Unlock()
			if p != nil {
				s.stamper.Stamp(p)
			}
			emit(p, err)
		})
	}
	wg.Wait()
}

// run polls every bus and line sensor on schedule until ctx ends; emit is
// serialised.
func (s *site) run(ctx context.Context, emit func(*packet.Packet)) {
	var mu sync.Mutex
	out := func(p *packet.Packet) {
		mu.Lock()
		defer mu.Unlock()
		s.stamper.Stamp(p)
		emit(p)
	}
	var wg sync.WaitGroup
	for _, b := range s.buses {
		wg.Go(func() { b.Run(ctx, out) })
	}
	for _, l := range s.lines {
		wg.Go(func() { l.Run(ctx, out) })
	}
	wg.Wait()
}

// status lists every device's health.
func (s *site) status() []sensors.DeviceStatus {
	var out []sensors.DeviceStatus
	for _, b := range s.buses {
		out = append(out, b.Status()...)
	}
	for _, l := range s.lines {
		out = append(out, l.Status())
	}
	return out
}

// modbusStats returns each bus's transport counters, by bus name.
func (s *site) modbusStats() map[string]modbus.Stats {
	out := make(map[string]modbus.Stats, len(s.buses))
	for i, b := range s.buses {
		out[b.Name()] = s.clients[i].Stats()
	}
	return out
}

// busSamples sums each bus's busy time and overruns over its devices.
func (s *site) busSamples() []metrics.BusSample {
	out := make([]metrics.BusSample, 0, len(s.buses))
	for _, b := range s.buses {
		smp := metrics.BusSample{Name: b.Name()}
		for _, d := range b.Status() {
			smp.Busy += d.Busy
			smp.Overruns += d.Overruns
		}
		out = append(out, smp)
	}
	return out
}
