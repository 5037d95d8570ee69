// Package updategate judges, from a running gateway's /metrics, whether it does
// its job: polls its devices, stores packets in its buffer and, when an
// upstream is reachable, delivers them. It is the gate an updater runs
// before it commits a new version (gateway health), so that a version that
// starts but cannot poll or deliver is rolled back.
//
// Network loss alone must not roll an update back: a [Baseline], recorded
// from the old daemon just before the update, says whether an upstream was
// reachable then and how many devices answered; [Judge] asks for deliveries
// only when one was, and holds the devices to the share that answered.
//
// Everything is read from the metrics endpoint the daemon already serves
// (on loopback, or on a LAN address with its token): nothing in the daemon
// knows about updates.
package updategate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Sample is what one scrape of a gateway's /metrics says.
type Sample struct {
	// Start is the daemon's start (process_start_time_seconds); zero when
	// the scrape lacks it.
	Start   time.Time
	Devices []Device
	// Buffered is true when the daemon has a buffer (a site with an
	// uplink): its buffer metrics are there.
	Buffered bool
	// Appends counts the records stored since the daemon opened its buffer.
	Appends uint64
	// Queued is how many records wait in the buffer.
	Queued    int64
	Upstreams []Upstream
}

// Device is one device's counters since the daemon started.
type Device struct {
	Bus, Name     string
	Polls, Errors uint64
	// Health is the device's state: unknown, ok, degraded or offline.
	Health string
}

// Answered returns the device's successful polls.
func (d Device) Answered() uint64 {
	if d.Errors > d.Polls {
		return 0
	}
	return d.Polls - d.Errors
}

// Upstream is one upstream's state and deliveries since the daemon started.
type Upstream struct {
	Name      string
	Up        bool
	Delivered uint64
}

// Reachable returns the names of the upstreams that are up.
func (s Sample) Reachable() []string {
	var up []string
	for _, u := range s.Upstreams {
		if u.Up {
			up = append(up, u.Name)
		}
	}
	return up
}

// Delivered returns the records delivered to every upstream.
func (s Sample) Delivered() uint64 {
	var n uint64
	for _, u := range s.Upstreams {
		n += u.Delivered
	}
	return n
}

// Target is a daemon's metrics listener as the gate reads it.
type Target struct {
	// Addr is the daemon's metrics.listen; an unspecified host (every
	// interface) is reached on loopback.
	Addr string
	// Token, when set, is sent as a bearer token: the daemon asks for it
	// on /metrics (metrics.scrape_token) from clients not on loopback.
	Token string
}

// Scrape reads http://addr/metrics, without a token; see [Target.Scrape].
func Scrape(ctx context.Context, addr string) (Sample, error) {
	return Target{Addr: addr}.Scrape(ctx)
}

// Scrape reads the daemon's /metrics.
func (t Target) Scrape(ctx context.Context) (Sample, error) {
	u := "http://" + dialAddr(t.Addr) + "/metrics"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Sample{}, err
	}
	if t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("the gateway's metrics at %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized && t.Token == "" {
		return Sample{}, fmt.Errorf("the gateway's metrics at %s: %s (metrics.scrape_token asks for the token of metrics.token_file, and the gate found none)", u, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("the gateway's metrics at %s: %s", u, resp.Status)
	}
	s, err := Parse(resp.Body)
	if err != nil {
		return Sample{}, fmt.Errorf("the gateway's metrics at %s: %w", u, err)
	}
	return s, nil
}

// dialAddr turns a listen address into one to connect to.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// onLoopback reports whether the host of addr (host:port) is a loopback
// address.
func onLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Parse reads the text exposition format and keeps the series a [Sample]
// holds; the others are skipped.
func Parse(r io.Reader) (Sample, error) {
	var s Sample
	devs := map[[2]string]*Device{}
	var order [][2]string
	dev := func(l map[string]string) *Device {
		k := [2]string{l["bus"], l["device"]}
		d := devs[k]
		if d == nil {
			d = &Device{Bus: k[0], Name: k[1], Health: "unknown"}
			devs[k] = d
			order = append(order, k)
		}
		return d
	}
	ups := map[string]*Upstream{}
	var upOrder []string
	up := func(l map[string]string) *Upstream {
		n := l["upstream"]
		u := ups[n]
		if u == nil {
			u = &Upstream{Name: n}
			ups[n] = u
			upOrder = append(upOrder, n)
		}
		return u
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || text[0] == '#' {
			continue
		}
		name, labels, value, err := parseLine(text)
		if err != nil {
			return Sample{}, fmt.Errorf("line %d: %w", line, err)
		}
		switch name {
		case "process_start_time_seconds":
			sec, frac := math.Modf(value)
			s.Start = time.Unix(int64(sec), int64(frac*1e9))
		case "fieldlink_device_polls_total":
			dev(labels).Polls = uint64(value)
		case "fieldlink_device_poll_errors_total":
			dev(labels).Errors = uint64(value)
		case "fieldlink_device_health":
			if value == 1 {
				dev(labels).Health = labels["state"]
			}
		case "fieldlink_buffer_appends_total":
			s.Buffered = true
			s.Appends = uint64(value)
		case "fieldlink_buffer_records":
			s.Buffered = true
			s.Queued += int64(value)
		case "fieldlink_upstream_up":
			up(labels).Up = value == 1
		case "fieldlink_upstream_delivered_records_total":
			up(labels).Delivered = uint64(value)
		}
	}
	if err := sc.Err(); err != nil {
		return Sample{}, err
	}
	for _, k := range order {
		s.Devices = append(s.Devices, *devs[k])
	}
	for _, n := range upOrder {
		s.Upstreams = append(s.Upstreams, *ups[n])
	}
	return s, nil
}

// parseLine splits `name{label="value",...} value [timestamp]`.
func parseLine(line string) (name string, labels map[string]string, value float64, err error) {
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return "", nil, 0, errors.New("no value")
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		labels, rest, err = parseLabels(rest[1:])
		if err != nil {
			return "", nil, 0, fmt.Errorf("%s: %w", name, err)
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 || len(f) > 2 {
		return "", nil, 0, fmt.Errorf("%s: want a value and at most a timestamp, got %q", name, rest)
	}
	value, err = strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("%s: %w", name, err)
	}
	return name, labels, value, nil
}

// parseLabels reads `a="x",b="y"}` and returns the labels and what follows
// the closing brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if s == "" {
			return nil, "", errors.New("labels not closed")
		}
		if s[0] == '}' {
			return labels, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, "", fmt.Errorf("bad label at %q", s)
		}
		key := strings.TrimSpace(s[:eq])
		var v strings.Builder
		j := eq + 2
		for ; j < len(s) && s[j] != '"'; j++ {
			c := s[j]
			if c == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					c = '\n'
				default:
					c = s[j]
				}
			}
			v.WriteByte(c)
		}
		if j >= len(s) {
			return nil, "", fmt.Errorf("label %s: value not closed", key)
		}
		labels[key] = v.String()
		s = s[j+1:]
	}
}
