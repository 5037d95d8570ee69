package agent

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"fieldlink/config"
	"fieldlink/exception"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
)

// Sensors is a site file's sensors side, open: its buses on their Modbus
// clients and its serial sensors, ready to poll.
type Sensors struct {
	*sensors.Poller
	cfg *config.Config
	// clients holds each bus's Modbus client, by bus as Site.Buses; nil
	// while the bus's serial port has not opened yet.
	clients []*atomic.Pointer[modbus.Client]
	values  packet.ValueStyle
	// reportByException holds back the packets that report by exception
	// finds unchanged; nil stores every packet.
	reportByException *exception.Filter
}

// OpenSensors opens every bus of c and builds its serial sensors. Nothing polls
// until the site runs; Close closes the ports.
//
// A serial port that does not open (the adapter unplugged, not enumerated
// yet at boot, renamed, busy, not allowed) fails no more than its own bus:
// that bus starts down, says why, and opens the port when it runs (see
// [sensors.BusOptions.Open]), so that the other buses, the delivery of what
// is buffered and the status page run meanwhile. A one-shot poll or write
// gets the port's error for each of the bus's devices.
func OpenSensors(c *config.Config, log *slog.Logger) (*Sensors, error) {
	s := &Sensors{cfg: c, values: c.Packet.Values, reportByException: exception.New(c)}
	var buses []*sensors.Bus
	for _, b := range c.Buses {
		ep, err := modbus.ParseURL(b.URL)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("bus %s: %w", b.Name, err)
		}
		opt := modbus.Options{Timeout: b.Timeout, Logger: log.With("bus", b.Name)}
		held := &atomic.Pointer[modbus.Client]{}
		s.clients = append(s.clients, held)
		var r sensors.Reader
		var open func() (sensors.Reader, error)
		port := ""
		if ep.Scheme == "rtu" {
			port = ep.Device
		}
		client, err := modbus.Open(b.URL, opt)
		switch {
		case err == nil:
			held.Store(client)
			r = client
		case port != "":
			// Only a serial port fails in Open (TCP dials lazily).
			first := err
			open = func() (sensors.Reader, error) {
				if e := first; e != nil {
					first = nil // the failure at start is the first try
					return nil, e
				}
				client, err := modbus.Open(b.URL, opt)
				if err != nil {
					return nil, err
				}
				held.Store(client)
				return client, nil
			}
		default:
			s.Close()
			return nil, fmt.Errorf("bus %s: %w", b.Name, err)
		}
		specs := make([]sensors.DeviceSpec, len(b.Devices))
		for i, d := range b.Devices {
			specs[i] = sensors.DeviceSpec{Name: d.Name, Slave: byte(d.Slave), Profile: c.DeviceProfile(&d), Interval: d.Interval, DataType: d.DataType}
		}
		bus, err := sensors.NewBus(b.Name, r, specs, sensors.BusOptions{
			Cost: sensors.BusCost(ep, *b.Turnaround), MaxGap: b.PlanMaxGap(), Backoff: b.Backoff, Logger: log, Hint: modbus.Hint,
			Port: port, Open: open,
		})
		if err != nil {
			s.Close()
			return nil, err
		}
		buses = append(buses, bus)
	}
	var serials []*sensors.SerialSensor
	for _, l := range c.SerialSensors {
		sp, err := config.ParseSerialURL(l.URL)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("serial sensor %s: %w", l.Name, err)
		}
		serials = append(serials, sensors.NewSerialSensor(sensors.SerialSpec{
			Name: l.Name, Profile: c.Profiles[l.Profile], DataType: l.DataType, Interval: l.Interval,
			Open: sensors.SerialOpener(sp.Path, sp.Baud, sp.Parity, sp.DataBits, sp.StopBits), Port: sp.Path,
		}, log))
	}
	s.Poller = sensors.NewPoller(&packet.Stamper{
		IDField: c.Site.IDField, SiteID: c.Site.ID, GatewayID: c.Gateway.ID, Loc: c.Location,
	}, buses, serials)
	return s, nil
}

// Config is the site file the site was opened from.
func (s *Sensors) Config() *config.Config { return s.cfg }

// Values is how the site's packets write DataBody values (the site file's
// packet.values).
func (s *Sensors) Values() packet.ValueStyle { return s.values }

// Close closes the site's ports; the site must not be running.
func (s *Sensors) Close() {
	for _, held := range s.clients {
		if c := held.Load(); c != nil {
			_ = c.Close()
		}
	}
}

// ModbusStats returns each bus's transport counters, by bus name.
func (s *Sensors) ModbusStats() map[string]modbus.Stats {
	out := make(map[string]modbus.Stats, len(s.clients))
	for i, b := range s.Buses() {
		if c := s.clients[i].Load(); c != nil {
			out[b.Name()] = c.Stats()
		}
	}
	return out
}

// BusSamples sums each bus's busy time and overruns over its devices.
func (s *Sensors) BusSamples() []sensors.BusSample {
	out := make([]sensors.BusSample, 0, len(s.Buses()))
	for _, b := range s.Buses() {
		smp := sensors.BusSample{Name: b.Name()}
		for _, d := range b.Status() {
			smp.Busy += d.Busy
			smp.Overruns += d.Overruns
		}
		out = append(out, smp)
	}
	return out
}
