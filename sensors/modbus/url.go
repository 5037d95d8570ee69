package modbus

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"fieldlink/internal/serialline"
)

// Defaults for the query of an rtu:// URL.
const (
	defaultTCPPort  = "502"
	schemeRTU       = "rtu"
	schemeTCP       = "tcp"
	schemeRTUOverIP = "rtuovertcp"
)

// config is a parsed and validated transport URL.
type config struct {
	scheme  string // schemeRTU, schemeTCP or schemeRTUOverIP
	device  string // rtu: serial device path
	address string // tcp, rtuovertcp: host:port
	// Settings: the line's, rtu (data bits always 8); rtuovertcp: the
	// baud, for frame timing.
	serialline.Settings
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

	c := config{scheme: u.Scheme, Settings: serialline.Default}
	if q.Has("baud") {
		if err := c.Set("baud", q.Get("baud")); err != nil {
			return bad("query key \"baud\" = %q: %v", q.Get("baud"), err)
		}
	}

	switch u.Scheme {
	case schemeRTU:
		if u.Host != "" || u.Path == "" {
			return bad("want the serial device as an absolute path after three slashes, for example rtu:///dev/ttyUSB0")
		}
		c.device = u.Path
		for _, k := range []string{"parity", "data_bits", "stop_bits"} {
			if !q.Has(k) {
				continue
			}
			v := q.Get(k)
			if k == "data_bits" && v != "8" {
				return bad("query key \"data_bits\" = %q: must be 8 (Modbus RTU sends 8-bit characters)", v)
			}
			if err := c.Set(k, v); err != nil {
				return bad("query key %q = %q: %v", k, v, err)
			}
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
