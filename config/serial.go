package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"fieldlink/internal/serialline"
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

// SerialPort is a parsed serial:// URL of a serial sensor.
type SerialPort struct {
	Path string
	serialline.Settings
}

// ParseSerialURL parses serial:///dev/ttyS1?baud=4800&parity=N&data_bits=8&stop_bits=1
// (defaults 9600, N, 8, 1; the rules are internal/serialline's).
func ParseSerialURL(raw string) (SerialPort, error) {
	sp := SerialPort{Settings: serialline.Default}
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
		switch err := sp.Set(k, val); {
		case errors.Is(err, serialline.ErrUnknownKey):
			return sp, fmt.Errorf("serial URL %q: unknown setting %q (valid: %s)", raw, k, strings.Join(serialline.Keys, ", "))
		case err != nil && k == "baud":
			return sp, fmt.Errorf("serial URL %q: baud must be a number such as 4800 or 9600, got %q", raw, val)
		case err != nil:
			return sp, fmt.Errorf("serial URL %q: %s %v, got %q", raw, k, err, val)
		}
	}
	return sp, nil
}
