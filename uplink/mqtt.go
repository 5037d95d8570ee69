package uplink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Errors returned by [MQTT.Publish]. Whatever the error, the broker did not
// acknowledge the packet: keep it in the buffer and send it again later.
var (
	// ErrMQTTNotConnected: there is no connection to the broker at the
	// moment (Run not started, connecting, or backing off after a failure).
	// Publish returns it at once; the message names the last failure.
	ErrMQTTNotConnected = errors.New("not connected")
	// ErrMQTTConnLost: the connection ended before the broker's PUBACK for
	// the packet arrived. The broker may or may not have the packet.
	ErrMQTTConnLost = errors.New("connection lost before PUBACK")
	// ErrMQTTAckTimeout: no PUBACK arrived within PublishTimeout. The
	// connection is then dropped and made again, so that a stuck link does
	// not hold the in-flight window.
	ErrMQTTAckTimeout = errors.New("no PUBACK in time")
	// ErrMQTTClientIDInUse: the broker dropped this gateway's connections
	// just after accepting them, several times in a row, as it does when
	// another client connects with the same client id (two gateways with
	// the same gateway.id, installed from one image): each connection
	// knocks the other off. See [MQTT.Run].
	ErrMQTTClientIDInUse = errors.New("another client uses this gateway's MQTT client id")
)

// mqttTakeoverDrops is how many connections in a row the broker must drop
// just after accepting them before [MQTT] says another client uses its id.
const mqttTakeoverDrops = 3

// Defaults of [MQTTConfig].
const (
	DefaultTopic = "fieldlink/{site}/{gateway}/{data_type}"
	// DefaultStatusTopic is where [MQTTConfig.StatusTopic] publishes
	// when it is empty.
	DefaultStatusTopic = "fieldlink/{site}/{gateway}/status"
	// StatusTopicOff as [MQTTConfig.StatusTopic] publishes no status: no
	// "online", no "offline", no last will.
	StatusTopicOff            = "off"
	DefaultWindow             = 64
	mqttDefaultKeepAlive      = 30 * time.Second
	mqttDefaultConnectTimeout = 5 * time.Second
	mqttDefaultPublishTimeout = 10 * time.Second

	mqttStatusOnline  = "online"
	mqttStatusOffline = "offline"
	// Reconnect backoff: jittered, exponential, from 1 s to 60 s.
	mqttBackoffMin = time.Second
	mqttBackoffMax = time.Minute
	// Most time spent publishing "offline" when Run ends.
	mqttOfflineTimeout = 5 * time.Second
	// Most time Disconnect waits for the DISCONNECT packet to be written.
	mqttDisconnectQuiesce = 500 // ms
)

// MQTTConfig configures one MQTT upstream (one broker). The zero value of
// every field but URL and Vars means its documented default.
type MQTTConfig struct {
	// URL of the broker: mqtt://host[:1883] (plain TCP) or
	// mqtts://host[:8883] (TLS). One spelling per concept: tcp://, ssl://,
	// tls:// and ws:// are refused, and so are credentials, a path or a
	// query in the URL (use Username and Password).
	URL string
	// ClientID defaults to "fieldlink-<gateway>-<n>", n counting the MQTT
	// upstreams made by this process from 1, in the order NewMQTT was called.
	// It must be unique on the broker: a second client with the same id
	// takes the session over.
	ClientID string
	// Topic is the template of data topics, default
	// "fieldlink/{site}/{gateway}/{data_type}". {data_type} and {device}
	// are replaced by the values Publish is given for each packet; any
	// other {name} by Vars[name], once, in NewMQTT. Values may not be empty
	// nor contain '/', '+', '#' or NUL.
	Topic string
	// QoS of data publishes. 1 (at least once) is the default, and is also
	// what 0 means here, since 0 is the zero value; set AtMostOnce for QoS 0.
	// 2 is not supported.
	QoS byte
	// AtMostOnce publishes data at QoS 0. Publish then returns nil as soon
	// as the packet is written to the socket: that is no acknowledgement,
	// and a packet can be lost with the connection (or with the broker).
	AtMostOnce bool
	// Window is the most publishes in flight on a connection, waiting for
	// their PUBACK (default 64, at most 65535). Keep it within what the
	// broker accepts in flight from one client. It also bounds the
	// duplicates sent again after a lost connection.
	Window int
	// Username and Password of the broker, if it wants them. The caller
	// resolves Password (from a file or an environment variable); it is
	// never logged nor put in an error.
	Username string
	Password string
	// TLS is the client TLS configuration for mqtts:// (see [TLSConfig]);
	// nil means the system roots, and verifying the server. Setting it for
	// an mqtt:// URL is an error rather than a silent clear-text link.
	TLS *tls.Config
	// StatusTopic gets a retained "online" after each connect, a retained
	// "offline" when Run ends, and "offline" is also the last will, which the
	// broker publishes (retained) when the connection breaks. Default
	// [DefaultStatusTopic], filled from Vars; [StatusTopicOff] publishes
	// none of them. See [CheckStatusTopic].
	StatusTopic string
	// KeepAlive (default 30 s; PINGREQ when idle, a dead link is found
	// within about KeepAlive + 10 s), ConnectTimeout (default 5 s, dial plus
	// TLS plus CONNACK) and PublishTimeout (default 10 s: the most time a
	// packet handed to paho may wait for its PUBACK, or a socket write may
	// take, before the connection is dropped and made again).
	KeepAlive      time.Duration
	ConnectTimeout time.Duration
	PublishTimeout time.Duration
	// LoadTopic, if set, is subscribed to after each connect; every message
	// on it (a retained load report) is handed to OnLoad. OnLoad runs on
	// one goroutine owned by Run, never concurrently with itself; reports
	// that arrive while it runs are coalesced to the latest one. An empty
	// payload means the retained report was cleared.
	LoadTopic string
	OnLoad    func(payload []byte)
	// Subscriptions are subscribed to (QoS 1) after each connect; each
	// message is handed to its Handle, one at a time per subscription, on
	// a goroutine owned by Run. Retained messages are dropped: a command
	// kept by the broker through an outage is a late command. Messages
	// that arrive while SubscriptionQueue are waiting are dropped and
	// logged.
	Subscriptions []Subscription
	// Logger gets connects, losses and retries; nil means slog.Default().
	Logger *slog.Logger
	// Vars are the template values of this gateway: site, gateway, ….
	Vars map[string]string
}

// mqttClientSeq numbers the default client ids.
var mqttClientSeq atomic.Uint64

// MQTT is one MQTT upstream: a broker connection kept up by Run, and
// Publish, which returns nil only once the broker's PUBACK for the packet
// arrived.
//
// IMPORTANT: the PUBACK is real because of how connections are made.
// paho can complete a QoS 1 token with no error and no PUBACK when it
// resends after an automatic reconnect (paho issues #563, #458). MQTT never
// lets it: each connection is a fresh paho client with a clean session and
// automatic reconnect off, made by Run's own loop. When a connection drops,
// paho fails every pending token ("connection lost before Publish
// completed"), and those packets are sent again from the buffer by the
// delivery loop, at most Window duplicates per drop.
//
// Each connection has one goroutine, its pump, that hands packets to paho
// and answers Publish's callers, in order, as PUBACKs come in; callers
// wait on their answer or on the loss of the connection, whichever comes
// first. Publish, Connected, Name and Window are safe for concurrent use.
type MQTT struct {
	cfg        MQTTConfig
	name       string // the URL, for logs and errors
	addr       string // host:port
	useTLS     bool
	tlsConfig  *tls.Config
	topic      mqttTemplate
	status     string
	qos        byte
	log        *slog.Logger
	backoffMin time.Duration
	backoffMax time.Duration

	cur     atomic.Pointer[mqttConn]
	lastErr atomic.Pointer[error] // why there is no connection
	noted   lastErr               // the latest connection error, kept after a reconnect
	running atomic.Bool
	loads   chan []byte // latest load report, for Run's dispatcher
	subs    []*subscription
	kick    chan struct{}     // ends a reconnect wait early (see Kick)
	session *sparkplugSession // Sparkplug B births, deaths and commands, or nil (see NewSparkplug)
}

// Kick tells Run that the broker looks reachable again (a latency probe
// answered): a reconnect wait in progress ends now, and the backoff starts
// over, so a recovered broker is used within a probe interval rather than
// after a backoff that grew during the outage. Safe to call at any time.
func (m *MQTT) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// NewMQTT checks cfg, applies its defaults and returns an upstream that is
// not connected yet: call Run.
func NewMQTT(cfg MQTTConfig) (*MQTT, error) {
	addr, useTLS, err := mqttParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("uplink: mqtt: %w", err)
	}
	m := &MQTT{
		addr:       addr,
		useTLS:     useTLS,
		log:        cfg.Logger,
		backoffMin: mqttBackoffMin,
		backoffMax: mqttBackoffMax,
		loads:      make(chan []byte, 1),
		kick:       make(chan struct{}, 1),
	}
	if useTLS {
		m.name = "mqtts://" + addr
	} else {
		m.name = "mqtt://" + addr
	}
	fail := func(format string, a ...any) (*MQTT, error) {
		return nil, fmt.Errorf("uplink: mqtt %s: %s", m.name, fmt.Sprintf(format, a...))
	}
	switch {
	case cfg.TLS != nil && !useTLS:
		return fail("a TLS configuration is set but the URL is mqtt:// (clear text): use mqtts://")
	case useTLS && cfg.TLS == nil:
		m.tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	case useTLS:
		m.tlsConfig = cfg.TLS.Clone()
	}
	switch {
	case cfg.AtMostOnce:
		m.qos = 0
	case cfg.QoS <= 1:
		m.qos = 1
	default:
		return fail("qos %d is not supported (0 or 1)", cfg.QoS)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Window < 0 || cfg.Window > 65535 {
		return fail("window %d is out of range (1..65535)", cfg.Window)
	}
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	if m.topic, err = mqttParseTemplate(cfg.Topic); err != nil {
		return fail("topic: %v", err)
	}
	if m.topic, err = m.topic.bind(cfg.Vars, "data_type", "device"); err != nil {
		return fail("topic %q: %v", cfg.Topic, err)
	}
	if cfg.StatusTopic == "" {
		cfg.StatusTopic = DefaultStatusTopic
	}
	if cfg.StatusTopic != StatusTopicOff {
		if m.status, err = mqttStatusTopic(cfg.StatusTopic, cfg.Vars); err != nil {
			return fail("status topic %q: %v", cfg.StatusTopic, err)
		}
	}
	if cfg.ClientID == "" {
		gw := cfg.Vars["gateway"]
		if gw == "" {
			return fail("client id: not set, and vars have no gateway to make the default from")
		}
		cfg.ClientID = "fieldlink-" + gw + "-" + strconv.FormatUint(mqttClientSeq.Add(1), 10)
	}
	if cfg.OnLoad != nil && cfg.LoadTopic == "" {
		return fail("OnLoad is set but LoadTopic is empty")
	}
	for _, sub := range cfg.Subscriptions {
		if sub.Handle == nil {
			return fail("subscription %q has no handler", sub.Topic)
		}
		t, err := mqttParseTemplate(sub.Topic)
		if err == nil {
			t, err = t.bind(cfg.Vars)
		}
		var topic string
		if err == nil {
			topic, err = t.render(nil)
		}
		if err != nil {
			return fail("subscription topic: %v", err)
		}
		m.subs = append(m.subs, &subscription{topic: topic, handle: sub.Handle, queue: make(chan []byte, SubscriptionQueue)})
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
		n   string
	}{
		{&cfg.KeepAlive, mqttDefaultKeepAlive, "keep-alive"},
		{&cfg.ConnectTimeout, mqttDefaultConnectTimeout, "connect timeout"},
		{&cfg.PublishTimeout, mqttDefaultPublishTimeout, "publish timeout"},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return fail("%s %v is negative", d.n, *d.v)
		}
	}
	if cfg.KeepAlive < time.Second {
		return fail("keep-alive %v is shorter than 1s", cfg.KeepAlive)
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.tlsConfig != nil && m.tlsConfig.InsecureSkipVerify {
		m.log.Warn("mqtt TLS does not verify the server (insecure_skip_verify)", "upstream", m.name)
	}
	m.cfg = cfg
	return m, nil
}

// mqttParseURL returns host:port and whether the scheme is mqtts. Its errors
// never repeat the URL, which could hold a password.
func mqttParseURL(raw string) (addr string, useTLS bool, err error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "", false, errors.New("URL must start with mqtt:// or mqtts://")
	}
	if strings.Contains(strings.SplitN(rest, "/", 2)[0], "@") {
		return "", false, errors.New("URL must not hold credentials: set username and password_file (or password_env)")
	}
	var port string
	switch strings.ToLower(scheme) {
	case "mqtt":
		port = "1883"
	case "mqtts":
		port, useTLS = "8883", true
	case "tcp":
		return "", false, fmt.Errorf("URL scheme %q: write mqtt:// instead", scheme)
	case "ssl", "tls":
		return "", false, fmt.Errorf("URL scheme %q: write mqtts:// instead", scheme)
	default:
		return "", false, fmt.Errorf("URL scheme %q is not supported (mqtt:// or mqtts://)", scheme)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, errors.New("URL is not valid") // url's error would repeat it
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false, errors.New("URL: no path, query or fragment allowed")
	}
	if u.Hostname() == "" {
		return "", false, errors.New("URL has no host")
	}
	if u.Port() != "" {
		port = u.Port()
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", false, fmt.Errorf("URL: bad port %q", port)
		}
	}
	return net.JoinHostPort(u.Hostname(), port), useTLS, nil
}

// Name identifies the upstream in logs and statistics: its URL without
// credentials.
func (m *MQTT) Name() string { return m.name }

// Window is the most publishes in flight at once (MQTTConfig.Window).
func (m *MQTT) Window() int { return m.cfg.Window }

// String is Name, so that printing an MQTT cannot show its password.
func (m *MQTT) String() string { return "MQTT(" + m.name + ")" }

// Connected reports whether a connection is up and announced "online".
// Once it turns false, Publish returns ErrMQTTNotConnected until Run has
// made a new connection.
func (m *MQTT) Connected() bool { return m.conn() != nil }

// conn returns the current connection if it is up, else nil.
func (m *MQTT) conn() *mqttConn {
	c := m.cur.Load()
	if c == nil || !c.cl.IsConnectionOpen() {
		return nil
	}
	select {
	case <-c.lost:
		return nil
	default:
		return c
	}
}

// Publish sends payload on the topic made from the template, topicVars
// (data_type, device) and Vars. At QoS 1 it returns nil only when the
// broker's PUBACK for this packet arrived; otherwise an error wrapping
// [ErrMQTTNotConnected] (returned at once), [ErrMQTTConnLost] (with
// [ErrMQTTAckTimeout] when the connection was dropped for a late PUBACK)
// or ctx's error. At QoS 0 nil means written to the socket. A packet whose
// topic cannot be made (a variable missing, empty, or with '/', '+', '#')
// gets an error whose Permanent method returns true: sending it again
// cannot help.
//
// At most Window publishes are in flight on a connection; more callers
// wait for a slot (or ctx, or the loss of the connection). To pipeline,
// call Publish from up to Window goroutines. A caller whose ctx ends
// returns at once, but its packet keeps its slot until its PUBACK or the
// end of the connection. payload is sent as it is, not copied: do not
// modify it after the call, even after an error.
func (m *MQTT) Publish(ctx context.Context, topicVars map[string]string, payload []byte) error {
	topic, err := m.topic.render(topicVars)
	if err != nil {
		return mqttTopicError{fmt.Errorf("uplink: mqtt %s: %w", m.name, err)}
	}
	c := m.conn()
	if c == nil {
		return m.notConnected()
	}
	select {
	case c.slots <- struct{}{}:
	default:
		select {
		case c.slots <- struct{}{}:
		case <-c.lost:
			return m.notConnected()
		case <-ctx.Done():
			return fmt.Errorf("uplink: mqtt %s: waiting for a window slot: %w", m.name, ctx.Err())
		}
	}
	// From here the slot is the pump's: it frees it with the outcome.
	r := mqttNewRequest(topic, payload)
	select {
	case c.requests <- r: // never blocks: it holds at most one request per slot
	default:
		<-c.slots
		return m.lostErr(c)
	}
	select {
	case err := <-r.res:
		mqttRequests.Put(r)
		return err
	case <-c.lost:
		select { // the pump may have had the PUBACK just before the loss
		case err := <-r.res:
			mqttRequests.Put(r)
			return err
		default:
		}
		return m.lostErr(c)
	case <-ctx.Done():
		return fmt.Errorf("uplink: mqtt %s: waiting for PUBACK: %w", m.name, ctx.Err())
	}
}

// mqttRequest is a publish handed to a connection's pump. Requests are
// reused once their outcome was received.
type mqttRequest struct {
	topic   string
	payload []byte
	res     chan error // the outcome, from the pump
}

var mqttRequests sync.Pool

func mqttNewRequest(topic string, payload []byte) *mqttRequest {
	r, _ := mqttRequests.Get().(*mqttRequest)
	if r == nil {
		r = &mqttRequest{res: make(chan error, 1)}
	}
	r.topic, r.payload = topic, payload
	return r
}

// mqttInflight is a request handed to paho, waiting for its PUBACK.
type mqttInflight struct {
	r    *mqttRequest
	tok  paho.Token
	sent time.Time
}

// pump is the one goroutine of a connection that calls paho's Publish for
// the requests and gives each its outcome, in order, freeing its slot.
// Calling paho from here rather than from Publish's callers matters:
// paho's Publish can block for up to its write timeout when the
// connection drops under it, and callers must learn of the loss at once.
// The oldest packet without its PUBACK after PublishTimeout has the
// connection dropped. When c.closing is closed, the pump answers the
// requests not yet sent, waits a little for the PUBACKs of those in
// flight, and returns.
func (m *MQTT) pump(c *mqttConn) {
	defer close(c.pumpDone)
	ring := make([]mqttInflight, m.cfg.Window) // FIFO of at most Window
	head, n := 0, 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	armed := -1 // ring index the timer is set for
	requests, closing := c.requests, c.closing
	var grace <-chan time.Time
	for {
		if closing == nil && n == 0 {
			return
		}
		var headDone <-chan struct{}
		if n > 0 {
			headDone = ring[head].tok.Done()
			if armed != head {
				timer.Reset(time.Until(ring[head].sent.Add(m.cfg.PublishTimeout)))
				armed = head
			}
		} else if armed >= 0 {
			timer.Stop()
			armed = -1
		}
		select {
		case r := <-requests:
			sent := time.Now()
			tok := c.cl.Publish(r.topic, m.qos, false, r.payload)
			ring[(head+n)%len(ring)] = mqttInflight{r: r, tok: tok, sent: sent}
			n++
		case <-headDone:
			for n > 0 {
				e := &ring[head]
				if !mqttTokenDone(e.tok) {
					break
				}
				<-c.slots // first, so that all are free once every caller returned
				e.r.res <- m.tokenErr(e.tok)
				*e = mqttInflight{}
				head, n = (head+1)%len(ring), n-1
			}
		case <-timer.C:
			armed = -1
			c.drop(fmt.Errorf("%w (%v)", ErrMQTTAckTimeout, m.cfg.PublishTimeout))
		case <-closing:
			requests, closing = nil, nil
			for drained := false; !drained; {
				select {
				case r := <-c.requests:
					<-c.slots
					r.res <- m.notConnected()
				default:
					drained = true
				}
			}
			grace = time.After(min(m.cfg.PublishTimeout, mqttOfflineTimeout))
		case <-grace:
			m.answerAll(ring, head, n, fmt.Errorf("uplink: mqtt %s: %w: stopped", m.name, ErrMQTTConnLost))
			return
		case <-c.lost:
			m.answerAll(ring, head, n, m.lostErr(c))
			return
		}
	}
}

// answerAll gives the n requests in flight from ring[head] their outcome
// when the connection ends: nil for those whose PUBACK came, else err.
func (m *MQTT) answerAll(ring []mqttInflight, head, n int, err error) {
	for ; n > 0; n-- {
		e := ring[head]
		if mqttTokenDone(e.tok) && e.tok.Error() == nil {
			e.r.res <- nil
		} else {
			e.r.res <- err
		}
		head = (head + 1) % len(ring)
	}
}

func mqttTokenDone(tok paho.Token) bool {
	select {
	case <-tok.Done():
		return true
	default:
		return false
	}
}

// await waits for tok, sent on connection c, to complete within timeout.
// Under the options connect sets, a publish token completes with no error
// only on its PUBACK (or, at QoS 0, once written); losing the connection
// fails it. Its errors do not name the upstream: they end up in a log line
// that does, or in the last error that [MQTT.Publish]'s error quotes.
func (m *MQTT) await(ctx context.Context, c *mqttConn, tok paho.Token, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-tok.Done():
		return awaitErr(tok)
	case <-c.lost:
		select { // the PUBACK may have come just before the loss
		case <-tok.Done():
			return awaitErr(tok)
		default:
		}
		return fmt.Errorf("%w: %v", ErrMQTTConnLost, c.lostErr)
	case <-t.C:
		err := fmt.Errorf("%w (%v)", ErrMQTTAckTimeout, timeout)
		c.drop(err)
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitErr is a completed token's error, without the upstream's name.
func awaitErr(tok paho.Token) error {
	if err := tok.Error(); err != nil {
		return fmt.Errorf("%w: %v", ErrMQTTConnLost, err)
	}
	return nil
}

func (m *MQTT) lostErr(c *mqttConn) error {
	if errors.Is(c.lostErr, ErrMQTTAckTimeout) {
		return fmt.Errorf("uplink: mqtt %s: %w: %w", m.name, ErrMQTTConnLost, c.lostErr)
	}
	return fmt.Errorf("uplink: mqtt %s: %w: %v", m.name, ErrMQTTConnLost, c.lostErr)
}

func (m *MQTT) tokenErr(tok paho.Token) error {
	err := tok.Error()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, paho.ErrNotConnected):
		return m.notConnected()
	default:
		return fmt.Errorf("uplink: mqtt %s: %w: %v", m.name, ErrMQTTConnLost, err)
	}
}

func (m *MQTT) notConnected() error {
	if p := m.lastErr.Load(); p != nil {
		return fmt.Errorf("uplink: mqtt %s: %w (last error: %v)", m.name, ErrMQTTNotConnected, *p)
	}
	return fmt.Errorf("uplink: mqtt %s: %w", m.name, ErrMQTTNotConnected)
}

func (m *MQTT) setLastErr(err error) {
	if err == nil {
		m.lastErr.Store(nil)
		return
	}
	m.lastErr.Store(&err)
}

// LastError is the latest reason a connection to the broker failed or
// ended, in words ([Explain]), and when; "" before the first. It stays
// after the connection is made again: the status page shows it beside
// the time. Safe for concurrent use.
func (m *MQTT) LastError() (string, time.Time) { return m.noted.get() }

// acceptedErr is a failure of [MQTT.connect] after the broker accepted
// the connection (its CONNACK came): the link was up, if briefly.
type acceptedErr struct{ error }

func (e acceptedErr) Unwrap() error { return e.error }

// droppedByBroker reports whether err ended a connection that the broker
// had accepted, lived for lived, by the broker closing it (as on a
// session takeover), rather than by a timeout or by this side.
func droppedByBroker(err error, lived, within time.Duration) bool {
	if lived >= within {
		return false
	}
	var acc acceptedErr
	if errors.As(err, &acc) {
		return errors.Is(err, ErrMQTTConnLost) && !errors.Is(err, ErrMQTTAckTimeout)
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// Run keeps a connection to the broker until ctx ends: it connects, and
// after a failure or a lost connection waits a jittered exponential backoff
// (1 s doubling to 60 s; reset after a connection that stayed up that long)
// and connects again, each time with a fresh paho client (clean session,
// no automatic reconnect: see [MQTT]). When the broker closes
// mqttTakeoverDrops connections in a row that it had accepted, each before
// it was up for the longest backoff, the loss is reported as
// [ErrMQTTClientIDInUse]: a broker that drops a client as another connects
// with its client id does just that, and the other client does the same
// in turn. When ctx ends it publishes a
// retained "offline", disconnects cleanly and returns once its goroutines
// have stopped: at once on a healthy link, after at most about
// 2×PublishTimeout on a stuck one. Call Run once.
func (m *MQTT) Run(ctx context.Context) {
	if !m.running.CompareAndSwap(false, true) {
		m.log.Error("uplink: mqtt: Run called twice; the second call returns at once", "upstream", m.name)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.cfg.OnLoad != nil {
		wg.Go(func() { m.dispatchLoads(ctx) })
	}
	for _, sub := range m.subs {
		wg.Go(func() { sub.dispatch(ctx) })
	}
	if m.session != nil {
		wg.Go(func() { m.session.run(ctx) })
	}
	attempt, drops := 0, 0
	for {
		c, err := m.connect(ctx)
		if err == nil {
			wg.Go(func() { m.pump(c) })
		}
		if ctx.Err() != nil {
			if c != nil {
				m.setLastErr(errors.New("stopped"))
				m.shutdown(c)
			}
			return
		}
		if err == nil {
			m.setLastErr(nil)
			m.cur.Store(c)
			m.log.Info("mqtt connected", "upstream", m.name, "client_id", m.cfg.ClientID)
			select {
			case <-ctx.Done():
				m.setLastErr(errors.New("stopped"))
				m.cur.Store(nil)
				m.shutdown(c)
				return
			case <-c.lost:
			}
			err = c.lostErr
			m.setLastErr(err)
			m.cur.Store(nil)
			c.closeSocket()
			if time.Since(c.since) >= m.backoffMax {
				attempt = 0
			}
		}
		lived := time.Duration(0)
		if c != nil {
			lived = time.Since(c.since)
		}
		if droppedByBroker(err, lived, m.backoffMax) {
			drops++
		} else {
			drops = 0
		}
		if drops >= mqttTakeoverDrops {
			err = fmt.Errorf("%w (%s): the broker drops each connection as the other connects (two gateways with the same gateway.id?); last: %v",
				ErrMQTTClientIDInUse, m.cfg.ClientID, err)
			if drops == mqttTakeoverDrops {
				m.log.Error("mqtt: another client uses this gateway's MQTT client id: the broker drops each connection as the other connects; give each gateway its own gateway.id",
					"upstream", m.name, "client_id", m.cfg.ClientID, "drops_in_a_row", drops)
			}
		}
		m.setLastErr(err)
		m.noted.note(err)
		d := m.backoff(attempt)
		attempt++
		m.log.Warn("mqtt upstream down", "upstream", m.name, "err", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-m.kick:
			t.Stop()
			attempt = 0
		}
	}
}

// backoff is the wait before connect attempt n+1: min·2^n capped at max,
// then jittered to between half and all of that.
func (m *MQTT) backoff(n int) time.Duration {
	d := m.backoffMax
	if n < 30 {
		d = min(m.backoffMin<<n, m.backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// mqttConn is one connection: one paho client, used once.
type mqttConn struct {
	cl    paho.Client
	since time.Time

	mu     sync.Mutex
	nc     net.Conn // the socket, once dialed
	closed bool     // closeSocket was called

	slots    chan struct{}     // the in-flight window: one per request not yet answered
	requests chan *mqttRequest // to the pump
	closing  chan struct{}     // closed to have the pump finish
	pumpDone chan struct{}     // closed when the pump has returned

	lostOnce sync.Once
	lostErr  error         // why, written before lost is closed
	lost     chan struct{} // closed when the connection is gone
}

func (c *mqttConn) markLost(err error) {
	c.lostOnce.Do(func() {
		c.lostErr = err
		close(c.lost)
	})
}

// closeSocket closes the socket now and any socket dialed later for c.
func (c *mqttConn) closeSocket() {
	c.mu.Lock()
	c.closed = true
	if c.nc != nil {
		_ = c.nc.Close()
	}
	c.mu.Unlock()
}

// drop ends a connection that cannot be trusted any more; paho then fails
// its pending tokens and Run makes a new one.
func (c *mqttConn) drop(err error) {
	c.markLost(err)
	c.closeSocket()
}

// connect makes a connection and announces it: subscribes to the load
// topic and publishes the retained "online". On error nothing is left
// running.
func (m *MQTT) connect(ctx context.Context) (*mqttConn, error) {
	c := &mqttConn{
		lost:     make(chan struct{}),
		slots:    make(chan struct{}, m.cfg.Window),
		requests: make(chan *mqttRequest, m.cfg.Window),
		closing:  make(chan struct{}),
		pumpDone: make(chan struct{}),
	}
	o := paho.NewClientOptions()
	o.AddBroker("tcp://" + m.addr) // dialed by dial below, whatever the scheme
	o.SetClientID(m.cfg.ClientID)
	o.SetProtocolVersion(4) // 3.1.1, no silent fallback to 3.1
	o.SetCleanSession(true)
	o.SetAutoReconnect(false)
	o.SetConnectRetry(false)
	o.SetOrderMatters(true) // handlers here never block
	o.SetKeepAlive(m.cfg.KeepAlive)
	o.SetConnectTimeout(m.cfg.ConnectTimeout)
	o.SetWriteTimeout(m.cfg.PublishTimeout)
	if m.status != "" {
		o.SetWill(m.status, mqttStatusOffline, 1, true)
	}
	if m.session != nil { // a Sparkplug node's will is its NDEATH
		topic, payload := m.session.will()
		o.SetBinaryWill(topic, payload, 1, false)
	}
	if m.cfg.Username != "" {
		o.SetUsername(m.cfg.Username)
	}
	if m.cfg.Password != "" {
		o.SetPassword(m.cfg.Password)
	}
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		c.markLost(fmt.Errorf("connection lost: %w", err))
	})
	o.SetCustomOpenConnectionFn(func(*url.URL, paho.ClientOptions) (net.Conn, error) {
		return m.dial(ctx, c)
	})
	c.cl = paho.NewClient(o)

	stop := context.AfterFunc(ctx, c.closeSocket) // ends a dial or a CONNACK wait
	tok := c.cl.Connect()
	<-tok.Done() // bounded by ConnectTimeout
	stopped := stop()
	if err := tok.Error(); err != nil {
		c.closeSocket()
		return nil, fmt.Errorf("connect: %w", err)
	}
	c.since = time.Now()
	fail := func(err error) (*mqttConn, error) {
		c.cl.Disconnect(0)
		c.drop(err)
		return nil, acceptedErr{err}
	}
	if !stopped {
		return fail(ctx.Err())
	}
	if m.cfg.LoadTopic != "" {
		st := c.cl.Subscribe(m.cfg.LoadTopic, 1, m.onLoadMessage)
		if err := m.await(ctx, c, st, m.cfg.PublishTimeout); err != nil {
			return fail(fmt.Errorf("subscribe to load topic: %w", err))
		}
		if code := st.(*paho.SubscribeToken).Result()[m.cfg.LoadTopic]; code == 0x80 {
			m.log.Warn("mqtt broker refused the load topic subscription", "upstream", m.name, "topic", m.cfg.LoadTopic)
		}
	}
	for _, sub := range m.subs {
		st := c.cl.Subscribe(sub.topic, 1, func(_ paho.Client, msg paho.Message) { m.deliver(sub, msg) })
		if err := m.await(ctx, c, st, m.cfg.PublishTimeout); err != nil {
			return fail(fmt.Errorf("subscribe to %s: %w", sub.topic, err))
		}
		if code := st.(*paho.SubscribeToken).Result()[sub.topic]; code == 0x80 {
			m.log.Error("mqtt broker refused a subscription: nothing can arrive through it", "upstream", m.name, "topic", sub.topic)
		}
	}
	if m.status != "" {
		if err := m.await(ctx, c, c.cl.Publish(m.status, 1, true, mqttStatusOnline), m.cfg.PublishTimeout); err != nil {
			return fail(fmt.Errorf("publish %q on the status topic: %w", mqttStatusOnline, err))
		}
	}
	if m.session != nil {
		if err := m.session.subscribe(ctx, c); err != nil {
			return fail(err)
		}
		if err := m.session.connected(ctx, c); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// dial opens the socket (and TLS) for connection c within ConnectTimeout.
func (m *MQTT) dial(ctx context.Context, c *mqttConn) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ConnectTimeout)
	defer cancel()
	var (
		nc  net.Conn
		err error
	)
	var d net.Dialer
	nc, err = d.DialContext(ctx, "tcp", m.addr)
	if err != nil {
		return nil, err
	}
	nc = quickAck(nc)
	if m.useTLS {
		cfg := m.tlsConfig
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(m.addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = nc.Close()
		return nil, errors.New("connection closed while dialing")
	}
	c.nc = nc
	return nc, nil
}

// shutdown lets the pump finish (the PUBACKs in flight come in while the
// link is up), publishes the retained "offline" and disconnects.
func (m *MQTT) shutdown(c *mqttConn) {
	close(c.closing)
	<-c.pumpDone
	var err error
	if m.status != "" {
		err = m.await(context.Background(), c, c.cl.Publish(m.status, 1, true, mqttStatusOffline),
			min(m.cfg.PublishTimeout, mqttOfflineTimeout))
	}
	if m.session != nil {
		if serr := m.session.ending(c); serr != nil {
			m.log.Warn("mqtt NDEATH not acknowledged; the broker publishes the will", "upstream", m.name, "err", serr)
		}
	}
	c.cl.Disconnect(mqttDisconnectQuiesce)
	c.drop(errors.New("stopped"))
	if err != nil {
		m.log.Warn("mqtt disconnected; the broker publishes the last will", "upstream", m.name, "err", err)
		return
	}
	m.log.Info("mqtt disconnected", "upstream", m.name)
}

// onLoadMessage runs on paho's router goroutine: it must not block, so it
// leaves the payload in a one-slot mailbox (the latest report wins).
func (m *MQTT) onLoadMessage(_ paho.Client, msg paho.Message) {
	p := append([]byte(nil), msg.Payload()...)
	for {
		select {
		case m.loads <- p:
			return
		default:
		}
		select {
		case <-m.loads:
		default:
		}
	}
}

func (m *MQTT) dispatchLoads(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-m.loads:
			m.cfg.OnLoad(p)
		}
	}
}

// Subscription is a topic an upstream subscribes to and what handles its
// messages.
type Subscription struct {
	// Topic template: {site} and {gateway} are filled in from Vars.
	Topic  string
	Handle func(payload []byte)
}

// SubscriptionQueue is how many messages may wait for a handler per
// upstream.
const SubscriptionQueue = 16

type subscription struct {
	topic  string
	handle func([]byte)
	queue  chan []byte
}

// deliver runs on paho's router goroutine: it must not block.
func (m *MQTT) deliver(sub *subscription, msg paho.Message) {
	if msg.Retained() {
		m.log.Warn("retained message dropped: commands and requests are never run late (clear the retained message on the broker)", "upstream", m.name, "topic", msg.Topic())
		return
	}
	select {
	case sub.queue <- append([]byte(nil), msg.Payload()...):
	default:
		m.log.Warn("message dropped: too many waiting", "upstream", m.name, "topic", sub.topic, "waiting", SubscriptionQueue)
	}
}

func (sub *subscription) dispatch(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-sub.queue:
			sub.handle(p)
		}
	}
}

// PublishTo publishes payload on topic at QoS 1, outside the packet
// stream (command results, state reports), and returns once the broker
// acknowledged it, or with the error that stopped it.
func (m *MQTT) PublishTo(ctx context.Context, topic string, payload []byte, retained bool) error {
	c := m.conn()
	if c == nil {
		return m.notConnected()
	}
	if err := m.await(ctx, c, c.cl.Publish(topic, 1, retained, payload), m.cfg.PublishTimeout); err != nil {
		return fmt.Errorf("uplink: mqtt %s: publish on %s: %w", m.name, topic, err)
	}
	return nil
}
