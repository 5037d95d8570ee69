// Package probe measures an upstream's round trip for the selector: a TCP
// connect, an HTTP GET, or a publish over the upstream's own connection
// (see [Prober]). The uplink's core and its kinds share it.
package probe

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"syscall"
	"time"

	"fieldlink/uplink/internal/httpc"
)

// Defaults of [New].
const (
	DefaultInterval = 10 * time.Second
	DefaultTimeout  = 2 * time.Second
	// LoadMaxBytes bounds an upstream's load report, polled over HTTP or
	// taken from an MQTT topic.
	LoadMaxBytes = 64 << 10
)

// DeniedLosses is how many probe publishes in a row must lose
// the connection under them (the broker closing it before the PUBACK)
// before the prober takes the probe topic for denied and probes with TCP
// connects instead.
const DeniedLosses = 2

// Prober measures the round-trip time to one upstream, on an interval, for
// the selector's latency statistics. Two kinds of probe:
//
//   - TCP (target "host:port"): the time of the TCP handshake alone, from the
//     moment the socket is created to the moment connect returns (name
//     resolution is not counted); the connection is closed at once. This is
//     the network's round trip; it says nothing about the server itself.
//   - HTTP (target an http:// or https:// URL, the upstream's probe URL,
//     health in the site file): a GET, whose round trip is counted from
//     the request written to the first byte of the answer, so that
//     connection setup, reused or not, is left out. Only a 2xx is a
//     success. Connections are kept alive between probes; redirects are
//     not followed.
//   - MQTT (an MQTT kind's [Conn].NewProber): a QoS 1 publish on a probe topic over the
//     upstream's own connection, timed from the publish to its PUBACK: the
//     broker's answer, as slow as its acks to the packets are, which a TCP
//     connect is not (a broker whose acks come late, or never, still
//     accepts connections). While the connection is down, a TCP connect to
//     the broker instead, so that a broker that answers again is known
//     (its upstream's kind then reconnects at once: [fieldlink/uplink.Conn].ProbeResult).
//     When the broker closes the connection under the probe's publish
//     twice in a row (what a broker that enforces its ACL by disconnecting
//     does, as AWS IoT Core and EMQX configured to disconnect do), the
//     topic is taken for denied: from then on the prober makes TCP
//     connects only, and says so once in its log. Brokers that acknowledge
//     a denied publish (mosquitto and NATS over MQTT 3.1.1) are not told
//     apart: their PUBACK still times the broker's answer.
//
// Every probe has the timeout given to [New] (unless the ctx of
// the probe has a deadline). A Prober is safe for concurrent use.
type Prober struct {
	target   string
	name     string // target for errors, without credentials or query
	interval time.Duration
	timeout  time.Duration
	report   func(rtt time.Duration, err error)

	// Publish probes (MQTT) only.
	pub        Publisher
	mqttTopic  string
	log        *slog.Logger // says a denied topic
	mqttMu     sync.Mutex
	mqttLosses int           // probe publishes in a row that lost the connection
	mqttDenied bool          // the topic is taken for denied: TCP from now on
	mqttBest   time.Duration // the fastest publish probe so far
	// TroubledEvery is TroubledInterval (shorter in tests).
	TroubledEvery time.Duration

	// HTTP probes only.
	url       string
	badURL    error
	transport *http.Transport
	client    *http.Client
}

// NewProber returns a prober of target: "host:port" for a TCP connect, or an
// http(s):// URL for a GET (see [Prober]); [ProbeTarget] derives host:port
// from an upstream's URL. tlsCfg is used for https only (nil: system roots).
// interval ≤ 0 means [DefaultInterval], timeout ≤ 0
// [DefaultTimeout]. report receives each probe's outcome from
// [Prober.Run]: the round trip on success, or 0 and an error; it is called
// from Run's goroutine, one call at a time, and should return quickly.
//
// A target that cannot be probed (a bad URL) is reported as an error by
// every probe, so that its upstream's statistics show it.
func New(target string, interval, timeout time.Duration, tlsCfg *tls.Config, report func(rtt time.Duration, err error)) *Prober {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if report == nil {
		report = func(time.Duration, error) {}
	}
	p := &Prober{target: target, name: target, interval: interval, timeout: timeout, report: report}
	if isURL(target) {
		u, err := httpc.ParseURL(target)
		if err != nil {
			p.name = "(bad URL)"
			p.badURL = err
			return p
		}
		p.name = httpc.RedactURL(u)
		p.url = u.String()
		p.transport = httpc.NewTransport(tlsCfg)
		p.transport.MaxIdleConns = 1
		p.transport.MaxIdleConnsPerHost = 1
		p.client = httpc.NewClient(p.transport)
	}
	return p
}

// Publisher is a connection a probe publishes over (an MQTT
// upstream's), so that the prober need not know the kind.
type Publisher interface {
	// Connected reports whether a publish can go now.
	Connected() bool
	// ProbePublish publishes an empty message on topic and waits for its
	// acknowledgement; closedByBroker says the broker closed the
	// connection under it.
	ProbePublish(ctx context.Context, topic string) (closedByBroker bool, err error)
	// Name names the upstream in logs.
	Name() string
}

// NewPublish returns a prober that publishes on topic over c while c
// is connected, and connects to addr (host:port) while it is not; log
// says when the broker seems to deny the topic.
func NewPublish(c Publisher, addr, topic string, interval, timeout time.Duration, log *slog.Logger, report func(rtt time.Duration, err error)) *Prober {
	p := New(addr, interval, timeout, nil, report)
	p.pub, p.mqttTopic, p.log, p.TroubledEvery = c, topic, log, TroubledInterval
	return p
}

// Run probes at once, then again every interval (±10% jitter, counted from
// the end of the previous probe) until ctx ends, reporting every outcome but
// those cut short by ctx's end. It returns promptly when ctx ends: a probe in
// flight is abandoned.
//
// An MQTT prober probes a broker in trouble again after TroubledInterval
// instead of the interval: one whose publish failed or answered far slower
// than its best (see [Prober.Troubled]), until a publish answers as usual,
// and one whose connection is down and refuses TCP connects, for the first
// DownFor of the outage. It looks at its connection every
// TroubledInterval between probes, and probes at once when it finds it
// lost. So a broker that recovers, or a node that restarts, is seen within
// about a second of answering again rather than an interval (10 s by
// default), and its gateways reconnect then, spread over that second by
// the outage's own start and the jitter; a healthy broker costs no more
// probes. A TCP connect that succeeds while the connection is down is
// followed by the interval, not the second: a broker that accepts
// connections but refuses or drops the MQTT one is retried at the
// connection's own backoff, with at most one reconnection an interval
// hastened by a probe.
func (p *Prober) Run(ctx context.Context) {
	if p.transport != nil {
		defer p.transport.CloseIdleConnections()
	}
	var downAt time.Time // when a probe first found the connection down; zero while up
	for ctx.Err() == nil {
		up := p.pub != nil && p.pub.Connected()
		rtt, viaMQTT, err := p.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		p.report(rtt, err)
		o := probeOutcome{failed: err != nil}
		if p.pub != nil && !up {
			if downAt.IsZero() {
				downAt = time.Now()
			}
			o.down, o.downFor = true, time.Since(downAt)
		} else {
			downAt = time.Time{}
		}
		if viaMQTT {
			o.troubled = p.Troubled(rtt, err)
		}
		if !p.wait(ctx, Jitter(p.next(o), rand.Float64()), up) {
			return
		}
	}
}

// probeOutcome is what [Prober.next] paces the next probe by.
type probeOutcome struct {
	// troubled: a publish probe failed or answered far slower than the
	// best ([Prober.Troubled]).
	troubled bool
	// down: the MQTT connection was down, so the probe was a TCP connect
	// to the broker; downFor is how long the prober has found it down.
	down    bool
	downFor time.Duration
	failed  bool // the probe failed
}

// next is the wait before the probe after one whose outcome was o,
// before jitter (see [Prober.Run]).
func (p *Prober) next(o probeOutcome) time.Duration {
	if o.troubled || (o.down && o.failed && o.downFor < DownFor) {
		return min(p.interval, p.TroubledEvery)
	}
	return p.interval
}

// wait waits d, or less when watch is set and the MQTT connection is
// found lost (looked at every TroubledEvery); false when ctx ended.
func (p *Prober) wait(ctx context.Context, d time.Duration, watch bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var look <-chan time.Time
	if watch && p.TroubledEvery < d {
		tk := time.NewTicker(p.TroubledEvery)
		defer tk.Stop()
		look = tk.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-look:
			if !p.pub.Connected() {
				return true
			}
		}
	}
}

// TroubledInterval is how often an MQTT prober probes a broker in
// trouble (see [Prober.Run]).
const TroubledInterval = time.Second

// DownFor is how long into an outage an MQTT prober keeps
// probing a broker that refuses connections every TroubledInterval;
// then every interval. A node restarted or failed over is back well
// within it; a broker down for longer costs its clients' connects a tenth
// as often.
const DownFor = 5 * time.Minute

// Troubled reports whether an MQTT publish probe's outcome says the broker
// is in trouble: the probe failed, or it answered more than 4 times and
// 100 ms slower than the best answer so far (a broker whose acks are late,
// as a slow or overloaded one's are). It keeps the best answer.
func (p *Prober) Troubled(rtt time.Duration, err error) bool {
	p.mqttMu.Lock()
	defer p.mqttMu.Unlock()
	if err != nil {
		return true
	}
	if p.mqttBest == 0 || rtt < p.mqttBest {
		p.mqttBest = rtt
	}
	return rtt > max(4*p.mqttBest, p.mqttBest+100*time.Millisecond)
}

// Once runs one probe and returns its round trip, or 0 and an error. When
// ctx has no deadline, the prober's timeout applies.
func (p *Prober) Once(ctx context.Context) (time.Duration, error) {
	rtt, _, err := p.probe(ctx)
	return rtt, err
}

// probe is Once, and also says whether it was an MQTT publish.
func (p *Prober) probe(ctx context.Context) (rtt time.Duration, viaMQTT bool, err error) {
	if p.badURL != nil {
		return 0, false, fmt.Errorf("uplink: probe: %w", p.badURL)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	if p.client != nil {
		rtt, err = p.probeHTTP(ctx)
		return rtt, false, err
	}
	if p.pub != nil && !p.Denied() && p.pub.Connected() {
		rtt, err = p.probeMQTT(ctx)
		return rtt, true, err
	}
	rtt, err = p.probeTCP(ctx)
	return rtt, false, err
}

func (p *Prober) probeTCP(ctx context.Context) (time.Duration, error) {
	// The socket's creation, just before connect, starts the clock: name
	// resolution is excluded. With several addresses, each has its own.
	var (
		mu     sync.Mutex
		starts = map[string]time.Time{}
	)
	d := net.Dialer{
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			mu.Lock()
			starts[address] = time.Now()
			mu.Unlock()
			return nil
		},
	}
	begin := time.Now()
	conn, err := d.DialContext(ctx, "tcp", p.target)
	end := time.Now()
	if err != nil {
		return 0, fmt.Errorf("uplink: probe tcp %s: %w", p.name, err)
	}
	mu.Lock()
	start, ok := starts[conn.RemoteAddr().String()]
	mu.Unlock()
	conn.Close()
	if !ok {
		start = begin
	}
	return max(end.Sub(start), time.Nanosecond), nil
}

func (p *Prober) probeMQTT(ctx context.Context) (time.Duration, error) {
	begin := time.Now()
	closed, err := p.pub.ProbePublish(ctx, p.mqttTopic)
	p.noteMQTT(err, closed)
	if err != nil {
		return 0, fmt.Errorf("uplink: probe: %w", err) // it names the broker
	}
	return max(time.Since(begin), time.Nanosecond), nil
}

// noteMQTT counts the probe publishes in a row whose connection the
// broker closed under them, and takes the topic for denied at the
// DeniedLosses-th.
func (p *Prober) noteMQTT(err error, closedByBroker bool) {
	lost := err != nil && closedByBroker
	p.mqttMu.Lock()
	defer p.mqttMu.Unlock()
	if !lost {
		p.mqttLosses = 0
		return
	}
	p.mqttLosses++
	if p.mqttLosses < DeniedLosses || p.mqttDenied {
		return
	}
	p.mqttDenied = true
	p.log.Warn("mqtt broker closed the connection under the probe's publish, twice in a row: the probe topic looks denied (ACL); probing with TCP connects from now on, which time the network, not the broker",
		"upstream", p.pub.Name(), "topic", p.mqttTopic, "err", err)
}

// Denied reports whether an MQTT prober took its topic for denied by the
// broker and probes with TCP connects (see [Prober]).
func (p *Prober) Denied() bool {
	p.mqttMu.Lock()
	defer p.mqttMu.Unlock()
	return p.mqttDenied
}

func (p *Prober) probeHTTP(ctx context.Context) (time.Duration, error) {
	// The trace hooks run on the transport's goroutines, and the answer may
	// come back before the writer's hook has run: guard the times.
	var (
		mu           sync.Mutex
		wrote, first time.Time
	)
	trace := &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			mu.Lock()
			wrote = time.Now()
			mu.Unlock()
		},
		GotFirstResponseByte: func() {
			mu.Lock()
			first = time.Now()
			mu.Unlock()
		},
	}
	begin := time.Now()
	_, _, err := httpc.Get(httptrace.WithClientTrace(ctx, trace), p.client, p.url, p.name, nil, httpc.DrainLimit)
	end := time.Now()
	if err != nil {
		return 0, err // it names the probe URL
	}
	mu.Lock()
	defer mu.Unlock()
	if wrote.IsZero() || first.IsZero() || first.Before(wrote) {
		return max(end.Sub(begin), time.Nanosecond), nil
	}
	return max(first.Sub(wrote), time.Nanosecond), nil
}

func isURL(target string) bool {
	t := strings.ToLower(target)
	return strings.HasPrefix(t, "http://") || strings.HasPrefix(t, "https://")
}

// Jitter spreads d by ±10%: r in [0, 1) maps onto [0.9d, 1.1d).
func Jitter(d time.Duration, r float64) time.Duration {
	if !(r >= 0 && r < 1) {
		r = 0.5
	}
	return time.Duration(float64(d) * (0.9 + 0.2*r))
}
