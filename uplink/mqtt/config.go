package mqtt

import (
	"crypto/tls"
	"errors"
	"fieldlink/uplink"
	topictmpl "fieldlink/uplink/internal/topic"
	"fieldlink/uplink/site"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultTopic is an upstream's topic template when the site file gives
// none.
const DefaultTopic = "fieldlink/{site}/{gateway}/{data_type}"

// Defaults of [mqttConfig].
const (
	// statusTopicOff as [mqttConfig.StatusTopic] publishes no status: no
	// "online", no "offline", no last will.
	statusTopicOff            = site.Off
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

// mqttConfig configures one MQTT upstream (one broker). The zero value of
// every field but URL and Vars means its documented default.
type mqttConfig struct {
	// URL of the broker: mqtt://host[:1883] (plain TCP) or
	// mqtts://host[:8883] (TLS). One spelling per concept: tcp://, ssl://,
	// tls:// and ws:// are refused, and so are credentials, a path or a
	// query in the URL (use Username and Password).
	URL string
	// ClientID defaults to "fieldlink-<gateway>-<n>", n counting the MQTT
	// upstreams made by this process from 1, in the order newMQTT was called.
	// It must be unique on the broker: a second client with the same id
	// takes the session over.
	ClientID string
	// Topic is the template of data topics, default
	// "fieldlink/{site}/{gateway}/{data_type}". {data_type} and {device}
	// are replaced by each packet's own values; any
	// other {name} by Vars[name], once, in newMQTT. Values may not be empty
	// nor contain '/', '+', '#' or NUL.
	Topic string
	// QoS of data publishes. 1 (at least once) is the default, and is also
	// what 0 means here, since 0 is the zero value; set AtMostOnce for QoS 0.
	// 2 is not supported.
	QoS byte
	// AtMostOnce publishes data at QoS 0. A publish then counts as done as soon
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
	// [DefaultStatusTopic], filled from Vars; "off" publishes
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
	// over their MaxSize, and messages that arrive while subscriptionQueue
	// are waiting, are dropped, counted and logged (see inboundStats).
	Subscriptions []uplink.Subscription
	// Logger gets connects, losses and retries; nil means slog.Default().
	Logger *slog.Logger
	// Vars are the template values of this gateway: site, gateway, ….
	Vars map[string]string
}

// newMQTT checks cfg, applies its defaults and returns an upstream that is
// not connected yet: call Run.
func newMQTT(cfg mqttConfig) (*mqttUpstream, error) {
	addr, useTLS, err := mqttParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("uplink: mqtt: %w", err)
	}
	m := &mqttUpstream{
		addr:       addr,
		useTLS:     useTLS,
		log:        cfg.Logger,
		backoffMin: mqttBackoffMin,
		backoffMax: mqttBackoffMax,
		stallAge:   mqttStallAge,
		loads:      make(chan []byte, 1),
		kick:       make(chan struct{}, 1),
	}
	if useTLS {
		m.name = "mqtts://" + addr
	} else {
		m.name = "mqtt://" + addr
	}
	fail := func(format string, a ...any) (*mqttUpstream, error) {
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
		cfg.Window = uplink.DefaultWindow
	}
	if cfg.Window < 0 || cfg.Window > 65535 {
		return fail("window %d is out of range (1..65535)", cfg.Window)
	}
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	if m.topic, err = topictmpl.Parse(cfg.Topic); err != nil {
		return fail("topic: %v", err)
	}
	if m.topic, err = m.topic.Bind(cfg.Vars, "data_type", "device"); err != nil {
		return fail("topic %q: %v", cfg.Topic, err)
	}
	if cfg.StatusTopic == "" {
		cfg.StatusTopic = uplink.DefaultStatusTopic
	}
	if cfg.StatusTopic != statusTopicOff {
		if m.status, err = uplink.ExpandTopic(cfg.StatusTopic, cfg.Vars); err != nil {
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
		topic, err := uplink.ExpandTopic(sub.Topic, cfg.Vars)
		if err != nil {
			return fail("subscription topic: %v", err)
		}
		if sub.MaxSize < 0 {
			return fail("subscription %q: max size %d is negative", sub.Topic, sub.MaxSize)
		}
		if sub.MaxSize == 0 {
			sub.MaxSize = defaultSubscriptionMax
		}
		m.subs = append(m.subs, &subscription{topic: topic, handle: sub.Handle, admit: sub.Admit, max: sub.MaxSize,
			queue: make(chan []byte, subscriptionQueue), admitted: make(chan []byte, subscriptionQueue)})
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
