package status

import (
	"strings"

	"fieldlink/sensors"
)

// busCause is why every failing device of bus fails, in words, when it is
// one reason on the link itself (the address refuses connections or does
// not answer them, the serial port is missing, busy or not allowed); ""
// when the devices fail for different or other reasons.
func busCause(bus string, devs []sensors.DeviceStatus) string {
	for _, d := range devs {
		if d.Bus == bus && d.Port.Down() {
			return portCause(d.Port.Err)
		}
	}
	cause := ""
	for _, d := range devs {
		if d.Bus != bus || (d.Health != sensors.Degraded && d.Health != sensors.Offline) {
			continue
		}
		c := linkCause(d.LastError)
		if c == "" || (cause != "" && c != cause) {
			return ""
		}
		cause = c
	}
	return cause
}

// portCause says in words why a serial port does not open, by its kind
// (as the system said it, see [sensors.PortError]), and what to check.
func portCause(pe *sensors.PortError) string {
	return pe.Advice()
}

// linkCause reads a poll's error for a failure to dial the link, and says
// it in words; "" for any other error. A serial port's failures are not
// read from the text: they carry their kind (see portCause).
func linkCause(err string) string {
	if i := strings.LastIndex(err, "dial tcp "); i >= 0 {
		rest := err[i+len("dial tcp "):]
		addr, why, _ := strings.Cut(rest, ": ")
		switch {
		case strings.Contains(why, "connection refused"):
			return addr + " refuses connections: nothing listens there (the Modbus gateway is off or restarting, or the address is wrong)"
		case strings.Contains(why, "i/o timeout"):
			return addr + " does not answer connections (the network or the Modbus gateway is down, or the address is wrong)"
		case strings.Contains(why, "no route to host"), strings.Contains(why, "network is unreachable"):
			return "no route to " + addr + " (the network is down, or the address is wrong)"
		}
	}
	return ""
}
