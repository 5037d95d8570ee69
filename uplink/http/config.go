package http

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"fieldlink/uplink"
	"fieldlink/uplink/internal/httpc"
)

// Config configures an [HTTP] publisher. Every field but URL, GatewayID
// and Epoch may be left zero.
type Config struct {
	// URL is the ingest endpoint, http:// or https://. Credentials written
	// in it (https://user:pass@host/…) are used for basic auth when
	// Username is empty; errors and logs never show them, nor the query.
	URL string

	// TLS configures https. nil verifies the server against the system's
	// roots; a config is cloned, and verifies by default too (set RootCAs
	// for a private CA). InsecureSkipVerify is honoured but logged as a
	// warning.
	TLS *tls.Config

	// Timeout bounds one post (a request and its answer) whose ctx has no
	// deadline: zero means 10 s. A deadline on ctx always wins, even a
	// longer one.
	Timeout time.Duration

	// Header is added to every request (e.g. Authorization: Bearer …).
	// Content-Type and Idempotency-Key are the publisher's and override it. Header
	// values are never logged, and are blanked out of response excerpts.
	Header http.Header

	// Encoding is how packets are posted: "" or [uplink.EncodingJSON] as JSON,
	// [uplink.EncodingInfluxLine] as InfluxDB line protocol (see docs/influx.md).
	Encoding uplink.Encoding

	// Token, if set, is sent as "Authorization: Bearer <token>", or
	// "Authorization: Token <token>" with [uplink.EncodingInfluxLine], as InfluxDB
	// wants it. It is never logged, and cannot go with basic auth or an
	// Authorization in Header.
	Token string

	// Username and Password, if Username is set, are sent as basic auth.
	// The password never appears in an error or a log line, and is blanked
	// out of the response excerpts that errors quote.
	Username, Password string

	// Logger gets one Debug line per post (no header values, no bodies), an
	// Info "http upstream reached" when a post first gets a 2xx answer and
	// again after one that got no answer or a 5xx (as MQTT logs "mqtt
	// connected" on each connect), and a Warn at construction if TLS
	// verification is off. nil discards.
	Logger *slog.Logger

	// GatewayID and Epoch name the gateway and its buffer's epoch in the
	// Idempotency-Key (<gateway>:<epoch>:<firstSeq>-<lastSeq>). Both are
	// required, printable ASCII: without the epoch, a rebuilt buffer would
	// reuse keys and the platform would drop new packets as replays.
	GatewayID, Epoch string
}

// New checks cfg and returns a publisher. It does no I/O.
func New(cfg Config) (*HTTP, error) {
	u, err := httpc.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("uplink: http: %w", err)
	}
	name := httpc.RedactURL(u)
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("uplink: http %s: negative timeout %v", name, cfg.Timeout)
	}
	if err := httpCheckKeyPart("GatewayID", cfg.GatewayID); err != nil {
		return nil, fmt.Errorf("uplink: http %s: %w", name, err)
	}
	if err := httpCheckKeyPart("Epoch", cfg.Epoch); err != nil {
		return nil, fmt.Errorf("uplink: http %s: %w", name, err)
	}
	user, pass := cfg.Username, cfg.Password
	if user == "" && u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	if strings.Contains(user, ":") {
		return nil, fmt.Errorf("uplink: http %s: basic-auth user name contains ':'", name)
	}
	h := &HTTP{
		name:    name,
		header:  cfg.Header.Clone(),
		timeout: cfg.Timeout,
		gateway: cfg.GatewayID,
		epoch:   cfg.Epoch,
		log:     cfg.Logger,
	}
	if h.header == nil {
		h.header = make(http.Header)
	}
	if h.timeout == 0 {
		h.timeout = defaultHTTPTimeout
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if user != "" {
		token := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		h.header.Set("Authorization", "Basic "+token)
		h.secrets = append(h.secrets, token)
		if pass != "" {
			h.secrets = append(h.secrets, pass)
		}
	}
	if err := h.setEncoding(cfg, u); err != nil {
		return nil, fmt.Errorf("uplink: http %s: %w", name, err)
	}
	u.User = nil
	h.url = u.String()
	h.transport = httpc.NewTransport(cfg.TLS)
	h.client = httpc.NewClient(h.transport)
	if cfg.TLS != nil && cfg.TLS.InsecureSkipVerify {
		h.log.Warn("uplink: http: TLS server verification is OFF", "upstream", name)
	}
	return h, nil
}
