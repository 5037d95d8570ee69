package commission

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/config"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
)

// bus checks a bus's serial port, if it has one, then reads the first
// block of each slave's profile, one slave at a time as the bus allows.
func (k *checker) bus(ctx context.Context, b *config.Bus) []Row {
	ep, err := modbus.ParseURL(b.URL)
	if err != nil {
		return []Row{{"bus " + b.Name, false, "its url: " + err.Error()}}
	}
	var rows []Row
	if ep.Scheme == "rtu" {
		port := k.port("bus "+b.Name+": port", ep.Device)
		rows = append(rows, port)
		if !port.OK {
			for _, d := range b.Devices {
				rows = append(rows, Row{device(b, d), false, "not read: the bus's port failed (above)"})
			}
			return rows
		}
	}
	timeout := min(b.Timeout, k.opt.Probe)
	if timeout <= 0 {
		timeout = k.opt.Probe
	}
	client, err := modbus.Open(b.URL, modbus.Options{Timeout: timeout})
	if err != nil {
		for _, d := range b.Devices {
			rows = append(rows, Row{device(b, d), false, "not read: the bus does not open: " + err.Error()})
		}
		return rows
	}
	defer client.Close()
	unreachable := ""
	for _, d := range b.Devices {
		switch {
		case unreachable != "":
			rows = append(rows, Row{device(b, d), false, "not read: " + unreachable})
		case ctx.Err() != nil:
			rows = append(rows, Row{device(b, d), false, fmt.Sprintf("not read: the check's %v ran out first (slaves before it on the bus did not answer)", k.opt.Deadline)})
		default:
			row, down := k.slave(ctx, client, b, ep, d)
			rows = append(rows, row)
			if down {
				unreachable = "the bus's " + ep.Address + " cannot be reached (above)"
			}
		}
	}
	return rows
}

// device names a device's row.
func device(b *config.Bus, d config.Device) string {
	return fmt.Sprintf("device %s (slave %d on bus %s)", d.Name, d.Slave, b.Name)
}

// slave reads the first block of d's profile. down is true when the
// bus's TCP peer cannot be reached: no other slave behind it will answer.
func (k *checker) slave(ctx context.Context, client *modbus.Client, b *config.Bus, ep modbus.Endpoint, d config.Device) (row Row, down bool) {
	what := device(b, d)
	reqs, err := sensors.PlanDevice(k.c.DeviceProfile(&d), b.PlanMaxGap(), sensors.BusCost(ep, turnaround(b)))
	if err != nil || len(reqs) == 0 {
		return Row{what, false, fmt.Sprintf("profile %s plans no read: %v", d.Profile, err)}, false
	}
	r := reqs[0]
	ctx, cancel := context.WithTimeout(ctx, k.opt.Probe)
	defer cancel()
	if _, err := client.Read(ctx, byte(d.Slave), r.Area.FunctionCode(), r.Start, r.Count); err != nil {
		return Row{what, false, readWhy(err, d, r.String(), ep)}, unreached(err)
	}
	return Row{what, true, fmt.Sprintf("answered the read of %s (the first block of profile %s)", r, d.Profile)}, false
}

// turnaround is a bus's slaves' think time, as the daemon plans with it.
func turnaround(b *config.Bus) time.Duration {
	if b.Turnaround != nil {
		return *b.Turnaround
	}
	return 10 * time.Millisecond
}

// readWhy says why a slave's read failed and what to check.
func readWhy(err error, d config.Device, what string, ep modbus.Endpoint) string {
	var ex *gm.ModbusError
	switch {
	case errors.As(err, &ex):
		return fmt.Sprintf("slave %d answers but refuses the read of %s (%v): is profile %s the right one for this device?", d.Slave, what, err, d.Profile)
	case unreached(err):
		return fmt.Sprintf("%s cannot be reached (%v): is the device server on, its address and port right?", ep.Address, err)
	}
	why := fmt.Sprintf("slave %d does not answer the read of %s: %v", d.Slave, what, err)
	if h := modbus.Hint(err); h != "" {
		why += ": " + h
	}
	return why
}

// unreached reports whether err is a TCP peer that cannot be reached.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
