package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// SerialSensor is a non-Modbus sensor that prints lines on a serial port.
type SerialSensor struct {
	Name string `yaml:"name,required"`
	// URL: serial:///dev/ttyS1?baud=4800 (parity, data_bits, stop_bits too).
	URL     string `yaml:"url,required"`
	Profile string `yaml:"profile,required"`
	// Interval: at most one packet per interval (the latest line); 0 = one
	// packet per line.
	Interval time.Duration `yaml:"interval"`
	DataType string        `yaml:"data_type"`
}

// SerialPort is a parsed serial:// URL of a line sensor.
type SerialPort struct {
	Path     string
	Baud     int
	Parity   byte // N, E or O
	DataBits int
	StopBits int
}

// ParseSerialURL parses serial:///dev/ttyS1?baud=4800&parity=N&data_bits=8&stop_bits=1
// (defaults 9600, N, 8, 1).
func ParseSerialURL(raw string) (SerialPort, error) {
	sp := SerialPort{Baud: 9600, Parity: 'N', DataBits: 8, StopBits: 1}
	u, err := url.Parse(raw)
	if err != nil {
		return sp, fmt.Errorf("serial URL %q: %v", raw, err)
	}
	if u.Scheme != "serial" {
		return sp, fmt.Errorf("serial URL %q: scheme must be serial (serial:///dev/ttyS1?baud=4800)", raw)
	}
	if u.Host != "" || u.Path == "" {
		return sp, fmt.Errorf("serial URL %q: give the device path after serial:// as in serial:///dev/ttyS1", raw)
	}
	sp.Path = u.Path
	for k, v := range u.Query() {
		val := v[len(v)-1]
		n, numErr := strconv.Atoi(val)
		switch k {
		case "baud":
			if numErr != nil || n < 300 || n > 4000000 {
				return sp, fmt.Errorf("serial URL %q: baud must be a number such as 4800 or 9600, got %q", raw, val)
			}
			sp.Baud = n
		case "parity":
			if val != "N" && val != "E" && val != "O" {
				return sp, fmt.Errorf("serial URL %q: parity must be N, E or O, got %q", raw, val)
			}
			sp.Parity = val[0]
		case "data_bits":
			if numErr != nil || (n != 7 && n != 8) {
				return sp, fmt.Errorf("serial URL %q: data_bits must be 7 or 8, got %q", raw, val)
			}
			sp.DataBits = n
		case "stop_bits":
			if numErr != nil || (n != 1 && n != 2) {
				return sp, fmt.Errorf("serial URL %q: stop_bits must be 1 or 2, got %q", raw, val)
			}
			sp.StopBits = n
		default:
			keys := []string{"baud", "parity", "data_bits", "stop_bits"}
			return sp, fmt.Errorf("serial URL %q: unknown setting %q (valid: %s)", raw, k, strings.Join(keys, ", "))
		}
	}
	return sp, nil
}
