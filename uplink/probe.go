package uplink

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"fieldlink/uplink/internal/httpc"
	"fieldlink/uplink/internal/probe"
)

// Prober measures the round-trip time to one upstream, on an interval,
// for the selector's latency statistics: a TCP connect, an HTTP GET, or a
// publish over the upstream's own connection (see [probe.Prober]).
type Prober = probe.Prober

// NewProber returns a prober of target: "host:port" for a TCP connect, or an
// http(s):// URL for a GET (see [probe.New]); [ProbeTarget] derives host:port
// from an upstream's URL. tlsCfg is used for https only (nil: system roots).
// interval ≤ 0 means [DefaultProbeInterval], timeout ≤ 0
// [DefaultProbeTimeout]; report receives each probe's outcome from Run.
func NewProber(target string, interval, timeout time.Duration, tlsCfg *tls.Config, report func(rtt time.Duration, err error)) *Prober {
	return probe.New(target, interval, timeout, tlsCfg, report)
}

// ProbeTarget returns the host:port that a TCP probe of an upstream dials,
// from the upstream's URL: mqtt:// (default port 1883), mqtts:// (8883),
// http:// (80) or https:// (443). IPv6 literals come out bracketed.
func ProbeTarget(upstreamURL string) (string, error) {
	target, err := probeTargetOf(upstreamURL)
	if err != nil {
		return "", fmt.Errorf("uplink: probe target: %w", err)
	}
	return target, nil
}

// probeTargetOf is ProbeTarget with errors free of any prefix.
func probeTargetOf(upstreamURL string) (string, error) {
	u, err := url.Parse(upstreamURL)
	if err != nil {
		return "", httpc.UnwrapURLError(err)
	}
	var port string
	switch strings.ToLower(u.Scheme) {
	case "mqtt":
		port = "1883"
	case "mqtts":
		port = "8883"
	case "http":
		port = "80"
	case "https":
		port = "443"
	default:
		return "", fmt.Errorf("%s: scheme %q is not mqtt, mqtts, http or https", httpc.RedactURL(u), u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return "", fmt.Errorf("%s: no host", httpc.RedactURL(u))
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "", fmt.Errorf("%s: bad port %q", httpc.RedactURL(u), p)
		}
		port = p
	} else if strings.HasSuffix(u.Host, ":") {
		return "", fmt.Errorf("%s: empty port", httpc.RedactURL(u))
	}
	return net.JoinHostPort(host, port), nil
}

// probeEvery calls fn at once, then every interval ±10% after fn returned,
// until ctx ends. Load pollers and the registry share it.
func probeEvery(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	for ctx.Err() == nil {
		fn(ctx)
		t := time.NewTimer(probeJitter(interval, rand.Float64()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// probeJitter spreads d by ±10% (see [probe.Jitter]).
func probeJitter(d time.Duration, r float64) time.Duration { return probe.Jitter(d, r) }
