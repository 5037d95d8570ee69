package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"fieldlink/config"
	"fieldlink/downlink"
	"fieldlink/sensors"
	"fieldlink/sensors/profile"
	"fieldlink/sparkplug"
	uplinksparkplug "fieldlink/uplink/sparkplug"
)

// sparkplugHooks are what a Sparkplug B node asks of the gateway: to run
// its DCMDs, and which devices answer.
type sparkplugHooks struct {
	command func(context.Context, uplinksparkplug.Command)
	online  func() map[string]bool
}

// sparkplugNode is the Sparkplug B node of an upstream: every device of
// the site, Modbus devices and serial sensors, with the points of its
// profile as metrics.
func sparkplugNode(c *config.Config, sp *config.Sparkplug, h sparkplugHooks) *uplinksparkplug.Config {
	n := &uplinksparkplug.Config{GroupID: sp.GroupID, EdgeNode: sp.EdgeNode, PrimaryHost: sp.PrimaryHost,
		OnCommand: h.command, Online: h.online}
	for _, b := range c.Buses {
		for i := range b.Devices {
			d := &b.Devices[i]
			dev := uplinksparkplug.Device{Name: d.Name}
			if p := c.DeviceProfile(d); p != nil {
				for _, r := range p.Registers {
					dev.Metrics = append(dev.Metrics, uplinksparkplug.Metric{Name: r.Name, Type: sparkplugType(&r), Unit: r.Unit, Alarm: r.Alarm != nil})
				}
			}
			n.Devices = append(n.Devices, dev)
		}
	}
	for _, l := range c.SerialSensors {
		dev := uplinksparkplug.Device{Name: l.Name}
		if p := c.Profiles[l.Profile]; p != nil && p.Line != nil {
			for _, f := range p.Line.Fields {
				t := sparkplug.Double
				switch f.Type {
				case "string":
					t = sparkplug.String
				case "bool":
					t = sparkplug.Boolean
				}
				dev.Metrics = append(dev.Metrics, uplinksparkplug.Metric{Name: f.Name, Type: t, Unit: f.Unit, Alarm: f.Alarm != nil})
			}
		}
		n.Devices = append(n.Devices, dev)
	}
	return n
}

// sparkplugOnline reports, for each device, whether it answers: any
// health but offline (after several failed polls in a row).
func sparkplugOnline(devs []sensors.DeviceStatus) map[string]bool {
	on := make(map[string]bool, len(devs))
	for _, d := range devs {
		on[d.Name] = d.Health != sensors.Offline
	}
	return on
}

// sparkplugType is the datatype of a register's value: its type, but
// Double for a scaled or offset number (the packet carries the scaled
// value).
func sparkplugType(r *profile.Register) sparkplug.DataType {
	scaled := r.ScaleOr1() != 1 || r.Offset != 0
	switch r.Type {
	case profile.Bool:
		return sparkplug.Boolean
	case profile.String:
		return sparkplug.String
	case profile.Float32:
		if !scaled {
			return sparkplug.Float
		}
	}
	if scaled || r.Type == profile.Float64 {
		return sparkplug.Double
	}
	if r.Area.IsBit() {
		return sparkplug.Boolean
	}
	return map[profile.Type]sparkplug.DataType{
		profile.Int16: sparkplug.Int16, profile.Uint16: sparkplug.UInt16, profile.Int32: sparkplug.Int32,
		profile.Uint32: sparkplug.UInt32, profile.Int64: sparkplug.Int64, profile.Uint64: sparkplug.UInt64,
	}[r.Type]
}

// sparkplugCommands turns a DCMD's metrics into downlink commands and runs
// each through the engine, with every rule of a command from the
// platform: writable points, limits, interlocks, read-back, the audit and
// the command ledger (and the signature, which a DCMD has not: with
// downlink.keys set, DCMDs are refused). A DCMD the node refused whole
// (more than uplinksparkplug.MaxCommandMetrics metrics, unreadable, for
// no device of the node) and a metric that makes no command (an alias of
// no point, no timestamp, a value that is not a finite number or a
// boolean) get a rejected result and an audit entry too, like any
// command refused.
//
// A DCMD carries no command id. Its id is made from what the host sent:
// "spb-" and a hash of the payload's bytes, the device and the metric's
// place in the payload (-1 for the DCMD whole). A DCMD delivered twice (a
// QoS 1 resend, a broker's redelivery after a reconnect) has the same id,
// and the ledger answers it from its first result instead of writing
// again; the payload's timestamp is the command's issued_at, so that a
// DCMD older than downlink.max_age (kept by a broker through an outage)
// expires.
func sparkplugCommands(engine func() *downlink.Engine, enabled func() bool, log *slog.Logger) func(context.Context, uplinksparkplug.Command) {
	return func(ctx context.Context, cmd uplinksparkplug.Command) {
		e := engine()
		if e == nil || !enabled() {
			log.Warn("DCMD refused: the downlink is off", "device", cmd.Device)
			return
		}
		if cmd.Refused != "" {
			res := e.Refuse(downlink.Command{ID: sparkplugID(cmd, -1), Device: cmd.Device, Actor: sparkplugActor(cmd)}, cmd.Refused)
			log.Warn("DCMD refused", "device", cmd.Device, "id", res.ID, "reason", res.Reason)
			return
		}
		for i, m := range cmd.Metrics {
			c, err := sparkplugCommand(cmd, i, m)
			if err != nil {
				res := e.Refuse(c, "DCMD metric "+strconv.Itoa(i)+": "+err.Error())
				log.Warn("DCMD metric refused", "device", cmd.Device, "metric", m.Name, "alias", m.Alias, "id", res.ID, "reason", res.Reason)
				continue
			}
			res := e.Run(ctx, c)
			log.Info("DCMD", "device", cmd.Device, "point", c.Point, "id", c.ID, "status", res.Status, "reason", res.Reason)
		}
	}
}

// sparkplugID is the command id of metric i of a DCMD (-1: the DCMD).
func sparkplugID(cmd uplinksparkplug.Command, i int) string {
	h := sha256.New()
	h.Write(cmd.Payload)
	fmt.Fprintf(h, "\x00%s\x00%d", cmd.Device, i)
	return "spb-" + hex.EncodeToString(h.Sum(nil)[:16])
}

func sparkplugActor(cmd uplinksparkplug.Command) string {
	return "sparkplug:DCMD seq " + strconv.FormatUint(cmd.Seq, 10)
}

// sparkplugCommand is the downlink command of metric i of a DCMD. On an
// error it returns what is known of the command (id, device, point,
// actor), for the refusal's result and audit entry.
func sparkplugCommand(cmd uplinksparkplug.Command, i int, m sparkplug.Metric) (downlink.Command, error) {
	c := downlink.Command{ID: sparkplugID(cmd, i), Device: cmd.Device, Point: m.Name, Actor: sparkplugActor(cmd)}
	if m.Name == "" {
		return c, fmt.Errorf("alias %d is not one of the device's", m.Alias)
	}
	if cmd.At == 0 {
		return c, fmt.Errorf("the DCMD has no timestamp")
	}
	if b, ok := m.Value.Bool(); ok {
		c.Value = downlink.Bool(b)
	} else if f, ok := m.Value.Float64(); ok {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return c, fmt.Errorf("value %v is not a finite number", f)
		}
		c.Value = downlink.Number(f)
	} else if n, ok := m.Int(); ok {
		c.Value = downlink.Number(float64(n))
	} else {
		return c, fmt.Errorf("value of datatype %v is not a number or a boolean", m.Type)
	}
	c.IssuedAt = downlink.NewTimestamp(time.UnixMilli(int64(cmd.At)))
	return c, nil
}
