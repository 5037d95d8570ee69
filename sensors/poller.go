package sensors

import (
	"context"
	"sync"

	"fieldlink/packet"
)

// Poller is every bus and serial sensor of one site, polled together: buses
// run in parallel, each with its own schedule, and every packet leaves
// stamped with the site's identity.
type Poller struct {
	stamper *packet.Stamper
	buses   []*Bus
	serials []*SerialSensor
}

// NewPoller returns a poller of these buses and serial sensors whose packets
// stamper stamps.
func NewPoller(stamper *packet.Stamper, buses []*Bus, serials []*SerialSensor) *Poller {
	return &Poller{stamper: stamper, buses: buses, serials: serials}
}

// Buses returns the poller's buses.
func (s *Poller) Buses() []*Bus { return s.buses }

// PollOnce polls every device once, buses in parallel, and calls emit for
// each packet or device error, one call at a time.
func (s *Poller) PollOnce(ctx context.Context, emit func(*packet.Packet, error)) {
	var mu sync.Mutex
	out := func(p *packet.Packet, err error) {
		mu.Lock()
		defer mu.Unlock()
		if p != nil {
			s.stamper.Stamp(p)
		}
		emit(p, err)
	}
	var wg sync.WaitGroup
	for _, b := range s.buses {
		wg.Go(func() { b.PollAll(ctx, out) })
	}
	for _, l := range s.serials {
		wg.Go(func() { out(l.ReadOne(ctx)) })
	}
	wg.Wait()
}

// Run polls every bus and serial sensor on schedule until ctx ends, and
// returns once each has stopped; emit is called one packet at a time.
func (s *Poller) Run(ctx context.Context, emit func(*packet.Packet)) {
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
	for _, l := range s.serials {
		wg.Go(func() { l.Run(ctx, out) })
	}
	wg.Wait()
}

// Status lists every device's health, serial sensors included.
func (s *Poller) Status() []DeviceStatus {
	var out []DeviceStatus
	for _, b := range s.buses {
		out = append(out, b.Status()...)
	}
	for _, l := range s.serials {
		out = append(out, l.Status())
	}
	return out
}

// Stamp gives a packet built outside the pollers (a command's record) the
// site's identity and the next sequence number.
func (s *Poller) Stamp(p *packet.Packet) { s.stamper.Stamp(p) }
