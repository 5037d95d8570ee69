package modbus

import (
	"fmt"

	"fieldlink/internal/serialline"
)

// Endpoint is a parsed bus URL, for configuration checks and the request
// planner's timing model.
type Endpoint struct {
	Scheme  string // rtu, tcp or rtuovertcp
	Device  string // rtu: serial device path
	Address string // tcp, rtuovertcp: host:port
	// Settings: the serial line's (rtu), or its baud (rtuovertcp).
	serialline.Settings
}

// ParseURL parses and validates a bus URL without opening anything.
func ParseURL(raw string) (Endpoint, error) {
	c, err := parseURL(raw)
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{Scheme: c.scheme, Device: c.device, Address: c.address, Settings: c.Settings}, nil
}

// Serial reports whether requests cross a serial line, directly (rtu) or
// behind a serial device server (rtuovertcp), so wire time applies.
func (e Endpoint) Serial() bool { return e.Scheme == schemeRTU || e.Scheme == schemeRTUOverIP }

// BitsPerChar is the length of one character on the line: start, data,
// parity and stop bits (11 for 8E1 and 8N2, 10 for 8N1).
func (e Endpoint) BitsPerChar() int {
	if e.DataBits == 0 {
		return 10
	}
	return e.Settings.CharBits()
}

// Port names what the bus occupies: a device path or a host:port.
func (e Endpoint) Port() string {
	if e.Scheme == schemeRTU {
		return e.Device
	}
	return e.Address
}

// LineSettings describes the line for people, e.g. "9600 8N1" or "Modbus TCP".
func (e Endpoint) LineSettings() string {
	switch e.Scheme {
	case schemeRTU:
		return e.Settings.String()
	case schemeRTUOverIP:
		return fmt.Sprintf("RTU over TCP, line %d baud", e.Baud)
	}
	return "Modbus TCP"
}
