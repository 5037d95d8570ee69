package uplink

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"fieldlink/uplink/internal/httpc"

	"fieldlink/internal/jsonkind"
	"fieldlink/selector"
	"fieldlink/uplink/internal/probe"
)

// Defaults and bounds of load reports.
const (
	// defaultLoadInterval is the poll interval of a [loadPoller]; keep it
	// well under the selector's LoadTTL (30 s by default).
	defaultLoadInterval = 10 * time.Second
	defaultLoadTimeout  = 5 * time.Second

	// loadMaxBytes bounds a load report.
	loadMaxBytes = probe.LoadMaxBytes
)

// loadField names a field of the wire format, in the order errors list them.
type loadField struct {
	key  string
	kind int // loadFraction, loadCount or loadCapacity
}

const (
	loadFraction = iota
	loadCount
	loadCapacity
)

var loadFields = [...]loadField{
	{"cpu", loadFraction}, {"memory", loadFraction}, {"disk_io", loadFraction}, {"network", loadFraction},
	{"processes", loadCount}, {"connections", loadCount},
	{"cpu_mhz", loadCapacity}, {"memory_mb", loadCapacity}, {"bandwidth_mbps", loadCapacity},
}

// parseLoad reads a server's load report (from an HTTP load endpoint, an
// upstream's load URL the pool polls, or an MQTT retained load topic)
// received at now. The report is one JSON object:
//
//	{"cpu":0.42,"memory":0.61,"disk_io":0.10,"network":0.25,
//	 "processes":183,"connections":57,
//	 "cpu_mhz":2400,"memory_mb":8192,"bandwidth_mbps":1000,
//	 "ts":"2026-11-29T08:00:00Z"}
//
// The fields:
//
//   - cpu, memory, disk_io, network: utilisation of the CPU, memory, disk
//     I/O and network, each a number, a fraction 0..1: 42 % is 0.42, and 42
//     is an error, not a percentage.
//   - processes, connections: the process and connection counts, whole
//     numbers 0..2147483647.
//   - cpu_mhz, memory_mb, bandwidth_mbps: capacities (CPU speed, memory
//     size, NIC bandwidth), numbers > 0.
//   - ts: when the server took the report, an optional RFC 3339 string;
//     absent or null means now.
//
// Every field but ts is required: a report that leaves one out is refused
// (rather than read as 0, which would make the server look idle), so that
// the selector falls back as though no report had come. Keys match exactly
// (case-sensitive); unknown keys are ignored, so servers may add their own.
// Wrong types (a string for a number, 0.5 processes), values out of range,
// invalid JSON, trailing data and reports over 64 KiB are errors; the
// error lists every problem found.
//
// The report's time, [selector.Load.At], is ts, but never later than now: a
// server clock ahead of the gateway's would otherwise keep a report fresh
// forever. A ts in the past ages the report, as it should (a retained MQTT
// message may be hours old); note that a gateway clock far behind (a board
// without a real-time clock before NTP) makes old reports look new.
func parseLoad(data []byte, now time.Time) (selector.Load, error) {
	var l selector.Load
	if len(data) > loadMaxBytes {
		return l, fmt.Errorf("uplink: load report: %d bytes, more than %d", len(data), loadMaxBytes)
	}
	var obj map[string]json.RawMessage
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return l, fmt.Errorf("uplink: load report: not a JSON object")
	}
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return l, fmt.Errorf("uplink: load report: bad JSON: %w", err)
	}
	var (
		problems []string
		missing  []string
	)
	for _, f := range loadFields {
		raw, ok := obj[f.key]
		if !ok || string(raw) == "null" {
			missing = append(missing, f.key)
			continue
		}
		v, err := loadNumber(raw)
		if err != nil {
			problems = append(problems, f.key+": "+err.Error())
			continue
		}
		switch f.kind {
		case loadFraction:
			if v < 0 || v > 1 {
				msg := fmt.Sprintf("%s %v: want a fraction 0..1", f.key, v)
				if v > 1 && v <= 100 {
					msg += fmt.Sprintf(" (%v%% is %v)", v, v/100)
				}
				problems = append(problems, msg)
				continue
			}
		case loadCount:
			n, err := strconv.ParseInt(string(raw), 10, 32)
			if err != nil || n < 0 {
				problems = append(problems, fmt.Sprintf("%s %s: want a whole number 0..%d", f.key, raw, math.MaxInt32))
				continue
			}
			v = float64(n)
		case loadCapacity:
			if !(v > 0) {
				problems = append(problems, fmt.Sprintf("%s %v: want a number > 0", f.key, v))
				continue
			}
		}
		loadSet(&l, f.key, v)
	}
	l.At = now
	if raw, ok := obj["ts"]; ok && string(raw) != "null" {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			problems = append(problems, "ts: want an RFC 3339 string")
		} else if ts, err := time.Parse(time.RFC3339Nano, s); err != nil {
			problems = append(problems, fmt.Sprintf("ts %q: want RFC 3339, like 2026-11-29T08:00:00Z", s))
		} else if ts.Before(now) {
			l.At = ts
		}
	}
	if len(missing) > 0 {
		problems = append([]string{"missing " + strings.Join(missing, ", ")}, problems...)
	}
	if len(problems) > 0 {
		return selector.Load{}, fmt.Errorf("uplink: load report: %s", strings.Join(problems, "; "))
	}
	return l, nil
}

// loadNumber reads a JSON number (and nothing else: no strings, no bools).
func loadNumber(raw json.RawMessage) (float64, error) {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, fmt.Errorf("want a number, got %s", jsonkind.Of(raw))
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("number %s out of range", raw)
	}
	return v, nil
}

func loadSet(l *selector.Load, key string, v float64) {
	switch key {
	case "cpu":
		l.CPU = v
	case "memory":
		l.Memory = v
	case "disk_io":
		l.DiskIO = v
	case "network":
		l.Network = v
	case "processes":
		l.Processes = int(v)
	case "connections":
		l.Connections = int(v)
	case "cpu_mhz":
		l.CPUMHz = v
	case "memory_mb":
		l.MemoryMB = v
	case "bandwidth_mbps":
		l.BandwidthMbps = v
	}
}

// loadPoller polls an upstream's HTTP load endpoint on an interval and hands
// each report, read by parseLoad, to a callback: the HTTP half of the
// server-reported load (the MQTT half reads a retained topic). Expiry of
// stale reports is the selector's ([selector.Options].LoadTTL).
type loadPoller struct {
	url       string
	name      string
	header    http.Header
	interval  time.Duration
	timeout   time.Duration
	report    func(selector.Load, error)
	transport *http.Transport
	client    *http.Client
}

// newLoadPoller returns a poller of loadURL, an http(s) URL (credentials in
// it are sent as basic auth and never shown). interval ≤ 0 means
// 10 s, timeout ≤ 0 5 s; tlsCfg is for https
// (nil: system roots). report receives, from [loadPoller.Run]'s goroutine and
// one call at a time, each report or the error of a failed poll (a zero Load).
// The answer must be a 2xx with a body parseLoad accepts; its Content-Type is
// not checked.
func newLoadPoller(loadURL string, interval, timeout time.Duration, tlsCfg *tls.Config, report func(selector.Load, error)) (*loadPoller, error) {
	u, err := httpc.ParseURL(loadURL)
	if err != nil {
		return nil, fmt.Errorf("uplink: load: %w", err)
	}
	if interval <= 0 {
		interval = defaultLoadInterval
	}
	if timeout <= 0 {
		timeout = defaultLoadTimeout
	}
	if report == nil {
		report = func(selector.Load, error) {}
	}
	p := &loadPoller{
		name:     httpc.RedactURL(u),
		header:   httpc.BasicAuthFromURL(u, nil),
		interval: interval,
		timeout:  timeout,
		report:   report,
	}
	p.url = u.String()
	p.transport = httpc.NewTransport(tlsCfg)
	p.transport.MaxIdleConns = 1
	p.transport.MaxIdleConnsPerHost = 1
	p.client = httpc.NewClient(p.transport)
	return p, nil
}

// Name returns the load URL without credentials or query.
func (p *loadPoller) Name() string { return p.name }

// Poll fetches and parses one report. When ctx has no deadline, the poller's
// timeout applies.
func (p *loadPoller) Poll(ctx context.Context) (selector.Load, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	_, body, err := httpc.Get(ctx, p.client, p.url, p.name, p.header, loadMaxBytes)
	if err != nil {
		return selector.Load{}, err // it names the load URL
	}
	l, err := parseLoad(body, time.Now())
	if err != nil {
		return selector.Load{}, fmt.Errorf("%w (from %s)", err, p.name)
	}
	return l, nil
}

// Run polls at once, then every interval (±10%) until ctx ends, reporting
// every outcome but those cut short by ctx's end. It returns promptly when ctx
// ends.
func (p *loadPoller) Run(ctx context.Context) {
	defer p.transport.CloseIdleConnections()
	probeEvery(ctx, p.interval, func(ctx context.Context) {
		l, err := p.Poll(ctx)
		if ctx.Err() != nil {
			return
		}
		p.report(l, err)
	})
}
