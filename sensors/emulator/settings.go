package emulator

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	"fieldlink/internal/serialline"
)

// Clamp is a write clamp (see [Faults.ClampWrite]) from the bounds of
// gateway emulate's -clamp-min and -clamp-max, raw register values where
// -1 leaves a bound open; nil when both are.
func Clamp(lo, hi int) (func(addr, v uint16) uint16, error) {
	if lo == -1 && hi == -1 {
		return nil, nil
	}
	if lo == -1 {
		lo = 0
	}
	if hi == -1 {
		hi = 0xFFFF
	}
	if lo < 0 || hi < lo || hi > 0xFFFF {
		return nil, errors.New("want 0 <= min <= max <= 65535")
	}
	return ClampRange(uint16(lo), uint16(hi)), nil
}

// ParseParity is a serial line's parity as [OpenSerial] and [CharBits]
// take it: N, E or O (serialline.ParseParity, the rule every serial
// setting follows).
func ParseParity(s string) (byte, error) { return serialline.ParseParity(s) }

// ErrNotLoopback is a listen address off the loopback interface, refused
// unless allowed: an emulator answering on a plant network could be
// mistaken for real sensors.
var ErrNotLoopback = errors.New("not a loopback address")

// ListenURL parses where to serve, tcp://HOST:PORT (Modbus TCP) or
// rtuovertcp://HOST:PORT, and refuses a HOST that is not a loopback
// address ([ErrNotLoopback]) unless allowRemote.
func ListenURL(raw string, allowRemote bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "rtuovertcp") || u.Host == "" {
		return nil, fmt.Errorf("%q: want tcp://HOST:PORT or rtuovertcp://HOST:PORT", raw)
	}
	if host := u.Hostname(); !allowRemote && host != "localhost" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("refusing to listen on %q: %w", host, ErrNotLoopback)
		}
	}
	return u, nil
}
