package modbus

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Defaults for the query of an rtu:// URL.
const (
	defaultBaud     = 9600
	defaultTCPPort  = "502"
	minBaud         = 300
	maxBaud         = 4000000
	rtuDataBits     = 8
	schemeRTU       = "rtu"
	schemeTCP       = "tcp"
	schemeRTUOverIP = "rtuovertcp"
)

// config is a parsed and validated transport URL.
type config struct {
	scheme   string // schemeRTU, schemeTCP or schemeRTUOverIP
	device   string // rtu: serial device path
	address  string // tcp, rtuovertcp: host:port
	baud     int    // rtu, rtuovertcp: line speed, for frame timing
	parity   byte   // rtu: 'N', 'E' or 'O'
	dataBits int    // rtu: always 8
	stopBits int    // rtu: 1 or 2
}

// bitsPerChar is the length of one character on the wire: start bit, data
// bits, parity bit if any, stop bits.
func (c config) bitsPerChar() int {
	n := 1 + c.dataBits + c.stopBits
	if c.parity != 'N' {
		n++
	}
	return n
}

// validKeys lists, per scheme, the query keys a URL may carry, in the order
// the error messages list them.
var validKeys = map[string][]string{
	schemeRTU:       {"baud", "parity", "data_bits", "stop_bits"},
	schemeTCP:       nil,
	schemeRTUOverIP: {"baud"},
}

// parseURL parses one of
//
//	rtu:///dev/ttyUSB0?baud=9600&parity=N&data_bits=8&stop_bits=1
//	tcp://host[:502]
//	rtuovertcp://host:port[?baud=9600]
//
// and reports the first problem in terms a technician editing the
// configuration can act on: the offending part of the URL and what is valid.
func parseURL(raw string) (config, error) {
	bad := func(format string, args ...any) (config, error) {
		return config{}, fmt.Errorf("modbus: URL %q: %s", raw, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", err)
	}
	keys, ok := validKeys[u.Scheme]
	if !ok || u.Scheme == "" {
		return bad("unknown scheme %q (valid: rtu, tcp, rtuovertcp)", u.Scheme)
	}
	if u.Opaque != "" || !strings.HasPrefix(raw[len(u.Scheme)+1:], "//") {
		return bad("scheme must be followed by // (for example %s://...)", u.Scheme)
	}
	if u.User != nil {
		return bad("user information is not allowed")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return bad("fragment (#...) is not allowed")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(keys, k) {
			if len(keys) == 0 {
				return bad("unknown query key %q (%s URLs take no query keys)", k, u.Scheme)
			}
			return bad("unknown query key %q (valid keys: %s)", k, strings.Join(keys, ", "))
		}
		if len(q[k]) > 1 {
			return bad("query key %q given %d times", k, len(q[k]))
		}
	}
	get := func(key, def string) string {
		if v, ok := q[key]; ok {
			return v[0]
		}
		return def
	}

	c := config{scheme: u.Scheme, baud: defaultBaud, parity: 'N', dataBits: rtuDataBits, stopBits: 1}
	if q.Has("baud") {
		v := q.Get("baud")
		b, err := strconv.Atoi(v)
		if err != nil || b < minBaud || b > maxBaud {
			return bad("query key \"baud\" = %q: must be an integer from %d to %d", v, minBaud, maxBaud)
		}
		c.baud = b
	}

	switch u.Scheme {
	case schemeRTU:
		if u.Host != "" || u.Path == "" {
			return bad("want the serial device as an absolute path after three slashes, for example rtu:///dev/ttyUSB0")
		}
		c.device = u.Path
		switch v := get("parity", "N"); v {
		case "N", "E", "O":
			c.parity = v[0]
		default:
			return bad("query key \"parity\" = %q: must be N, E or O", v)
		}
		if v := get("data_bits", "8"); v != "8" {
			return bad("query key \"data_bits\" = %q: must be 8 (Modbus RTU sends 8-bit characters)", v)
		}
		switch v := get("stop_bits", "1"); v {
		case "1", "2":
			c.stopBits = int(v[0] - '0')
		default:
			return bad("query key \"stop_bits\" = %q: must be 1 or 2", v)
		}
		return c, nil

	default: // tcp, rtuovertcp
		if u.Path != "" && u.Path != "/" {
			return bad("unexpected path %q: want %s://host:port", u.Path, u.Scheme)
		}
		host, port := u.Hostname(), u.Port()
		if host == "" {
			return bad("missing host: want %s://host:port", u.Scheme)
		}
		if port == "" {
			if strings.HasSuffix(u.Host, ":") {
				return bad("empty port after ':'")
			}
			if u.Scheme == schemeRTUOverIP {
				return bad("missing port: want rtuovertcp://host:port with the device server's TCP port (for example :4001)")
			}
			port = defaultTCPPort
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return bad("port %q: must be a number from 1 to 65535", port)
		}
		c.address = net.JoinHostPort(host, port)
		return c, nil
	}
}
