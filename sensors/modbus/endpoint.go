package modbus

import "fmt"

// Endpoint is a parsed bus URL, for configuration checks and the request
// planner's timing model.
type Endpoint struct {
	Scheme   string // rtu, tcp or rtuovertcp
	Device   string // rtu: serial device path
	Address  string // tcp, rtuovertcp: host:port
	Baud     int    // rtu, rtuovertcp: line speed
	Parity   byte   // 'N', 'E' or 'O'
	DataBits int
	StopBits int
}

// ParseURL parses and validates a bus URL without opening anything.
func ParseURL(raw string) (Endpoint, error) {
	c, err := parseURL(raw)
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{Scheme: c.scheme, Device: c.device, Address: c.address, Baud: c.baud,
		Parity: c.parity, DataBits: c.dataBits, StopBits: c.stopBits}, nil
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
	n := 1 + e.DataBits + e.StopBits
	if e.Parity != 'N' && e.Parity != 0 {
		n++
	}
	return n
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
		return fmt.Sprintf("%d %d%c%d", e.Baud, e.DataBits, e.Parity, e.StopBits)
	case schemeRTUOverIP:
		return fmt.Sprintf("RTU over TCP, line %d baud", e.Baud)
	}
	return "Modbus TCP"
}
