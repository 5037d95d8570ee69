package modbus

import (
	"strings"
	"testing"

	"go.bug.st/serial"

	"fieldlink/internal/serialline"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		url  string
		want config
	}{
		{"rtu:///dev/ttyUSB0", config{scheme: "rtu", device: "/dev/ttyUSB0", Settings: serialline.Settings{Baud: 9600, Parity: 'N', DataBits: 8, StopBits: 1}}},
		{"rtu:///dev/ttyUSB0?baud=19200&parity=E&data_bits=8&stop_bits=1",
			config{scheme: "rtu", device: "/dev/ttyUSB0", Settings: serialline.Settings{Baud: 19200, Parity: 'E', DataBits: 8, StopBits: 1}}},
		{"rtu:///dev/serial/by-id/usb-FTDI_FT232R-if00-port0?parity=O&stop_bits=2",
			config{scheme: "rtu", device: "/dev/serial/by-id/usb-FTDI_FT232R-if00-port0", Settings: serialline.Settings{Baud: 9600, Parity: 'O', DataBits: 8, StopBits: 2}}},
		{"rtu:///dev/ttyAMA0?baud=115200", config{scheme: "rtu", device: "/dev/ttyAMA0", Settings: serialline.Settings{Baud: 115200, Parity: 'N', DataBits: 8, StopBits: 1}}},
		{"tcp://10.0.0.5", config{scheme: "tcp", address: "10.0.0.5:502", Settings: serialline.Settings{Baud: 9600, Parity: 'N', DataBits: 8, StopBits: 1}}},
		{"tcp://plc.local:5020/", config{scheme: "tcp", address: "plc.local:5020", Settings: serialline.Settings{Baud: 9600, Parity: 'N', DataBits: 8, StopBits: 1}}},
		{"tcp://[fe80::1]:502", config{scheme: "tcp", address: "[fe80::1]:502", Settings: serialline.Settings{Baud: 9600, Parity: 'N', DataBits: 8, StopBits: 1}}},
		{"rtuovertcp://moxa1:4001", config{scheme: "rtuovertcp", address: "moxa1:4001", Settings: serialline.Settings{Baud: 9600, Parity: 'N', DataBits: 8, StopBits: 1}}},
		{"rtuovertcp://moxa1:4001?baud=38400", config{scheme: "rtuovertcp", address: "moxa1:4001", Settings: serialline.Settings{Baud: 38400, Parity: 'N', DataBits: 8, StopBits: 1}}},
	}
	for _, tt := range good {
		got, err := parseURL(tt.url)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tt.url, err)
			continue
		}
		if got != tt.want {
			t.Errorf("parseURL(%q) = %+v, want %+v", tt.url, got, tt.want)
		}
	}

	bad := []struct {
		url  string
		want []string // substrings of the error
	}{
		{"", []string{`unknown scheme ""`, "rtu, tcp, rtuovertcp"}},
		{"/dev/ttyUSB0", []string{`unknown scheme ""`}},
		{"serial:///dev/ttyUSB0", []string{`unknown scheme "serial"`}},
		{"rtu:/dev/ttyUSB0", []string{"followed by //"}},
		{"rtu://dev/ttyUSB0", []string{"three slashes", "rtu:///dev/ttyUSB0"}},
		{"rtu://", []string{"three slashes"}},
		{"rtu:dev", []string{"followed by //"}},
		{"rtu:///dev/ttyUSB0?baud=fast", []string{`"baud" = "fast"`, "300 to 4000000"}},
		{"rtu:///dev/ttyUSB0?baud=", []string{`"baud" = ""`}},
		{"rtu:///dev/ttyUSB0?baud=0", []string{`"baud" = "0"`}},
		{"rtu:///dev/ttyUSB0?baud=9600&baud=19200", []string{`"baud" given 2 times`}},
		{"rtu:///dev/ttyUSB0?parity=X", []string{`"parity" = "X"`, "N, E or O"}},
		{"rtu:///dev/ttyUSB0?parity=e", []string{`"parity" = "e"`, "N, E or O"}},
		{"rtu:///dev/ttyUSB0?parity=none", []string{`"parity" = "none"`}},
		{"rtu:///dev/ttyUSB0?data_bits=7", []string{`"data_bits" = "7"`, "must be 8"}},
		{"rtu:///dev/ttyUSB0?stop_bits=1.5", []string{`"stop_bits" = "1.5"`, "1 or 2"}},
		{"rtu:///dev/ttyUSB0?speed=9600", []string{`unknown query key "speed"`, "baud, parity, data_bits, stop_bits"}},
		{"rtu:///dev/ttyUSB0?databits=8", []string{`unknown query key "databits"`}},
		{"rtu:///dev/ttyUSB0#x", []string{"fragment"}},
		{"rtu:///dev/ttyUSB0?baud=%zz", []string{"query"}},
		{"tcp://", []string{"missing host"}},
		{"tcp://:502", []string{"missing host"}},
		{"tcp://plc:", []string{"empty port"}},
		{"tcp://plc:0", []string{`port "0"`, "1 to 65535"}},
		{"tcp://plc:70000", []string{`port "70000"`}},
		{"tcp://plc:502/unit/1", []string{`unexpected path "/unit/1"`}},
		{"tcp://plc?unit=1", []string{`unknown query key "unit"`, "take no query keys"}},
		{"tcp://plc?baud=9600", []string{`unknown query key "baud"`}},
		{"tcp://user:pw@plc", []string{"user information"}},
		{"rtuovertcp://moxa1", []string{"missing port", "4001"}},
		{"rtuovertcp://moxa1:4001?parity=E", []string{`unknown query key "parity"`, "valid keys: baud"}},
		{"rtuovertcp://moxa1:4001?baud=1", []string{`"baud" = "1"`}},
	}
	for _, tt := range bad {
		_, err := parseURL(tt.url)
		if err == nil {
			t.Errorf("parseURL(%q) succeeded, want an error", tt.url)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "modbus: URL ") {
			t.Errorf("parseURL(%q) = %q, want the prefix \"modbus: URL \"", tt.url, msg)
		}
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("parseURL(%q) = %q, want it to contain %q", tt.url, msg, w)
			}
		}
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open("rtu:///dev/ttyUSB0?parity=X", Options{}); err == nil || !strings.Contains(err.Error(), "parity") {
		t.Errorf("bad URL: %v", err)
	}
	dev := t.TempDir() + "/ttyNOPE0"
	_, err := Open("rtu://"+dev+"?baud=19200&parity=E", Options{})
	if err == nil || !strings.Contains(err.Error(), "open serial port "+dev+" at 19200 8E1") {
		t.Errorf("missing port: %v, want an error naming %s", err, dev)
	}
	if err == nil || !strings.Contains(err.Error(), "is the adapter plugged in?") {
		t.Errorf("missing port: %v, want a hint", err)
	}
	if h := portHint(serial.PermissionDenied); !strings.Contains(h, "dialout group") {
		t.Errorf("permission denied: hint %q does not name the dialout group", h)
	}
	c, err := Open("tcp://127.0.0.1:1", Options{})
	if err != nil {
		t.Fatalf("tcp dials lazily, Open must not fail: %v", err)
	}
	c.Close()
}
