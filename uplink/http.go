package uplink

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults and bounds of the HTTP publisher.
const (
	// defaultHTTPTimeout bounds one post whose ctx has no deadline.
	defaultHTTPTimeout = 10 * time.Second

	// httpExcerptLen is how much of a response body an [httpError] quotes.
	httpExcerptLen = 200
	// httpDrainLimit is how much of a response body is read and discarded
	// so that its connection can be reused; a longer body closes the
	// connection instead.
	httpDrainLimit = 64 << 10
	// httpMaxRetryAfter caps the Retry-After hint.
	httpMaxRetryAfter = 24 * time.Hour
)

// errInvalidPacket is returned by post when a packet of the batch is
// not valid JSON. Nothing is sent; resending will not make the packet valid,
// so [HTTPSender.Send] counts it as refused.
var errInvalidPacket = errors.New("uplink: packet is not valid JSON")

// HTTPConfig configures an [HTTP] publisher. Every field but URL, GatewayID
// and Epoch may be left zero.
type HTTPConfig struct {
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

	// Encoding is how packets are posted: "" or [EncodingJSON] as JSON,
	// [EncodingInfluxLine] as InfluxDB line protocol (see docs/influx.md).
	Encoding Encoding

	// Token, if set, is sent as "Authorization: Bearer <token>", or
	// "Authorization: Token <token>" with [EncodingInfluxLine], as InfluxDB
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

// HTTP publishes packets to one HTTP(S) ingest endpoint by POST. A 2xx answer
// acknowledges the packets; every other outcome is an error (one naming
// the status, or an invalid packet). Which errors refuse the packets and
// which are the upstream's failure is [HTTPSender.Send]'s rule; retrying,
// backing off and choosing another upstream are the delivery loop's.
//
// Each HTTP has its own connection pool (one [http.Transport]): connections
// are kept alive and reused (up to 4 idle, 90 s), response bodies are drained
// so that they can be; at most 8 connections are open at once, further posts
// wait for one (bounded by their ctx). HTTP/2 is used when the server offers
// it. HTTPS_PROXY, HTTP_PROXY and NO_PROXY are honoured. Redirects are not
// followed: a 3xx is an error.
// Because every request carries an Idempotency-Key, net/http itself may
// resend a request once when a kept-alive connection turns out to be dead
// before any answer.
//
// An HTTP is safe for concurrent use. Close releases its idle connections.
type HTTP struct {
	url       string // request URL, without userinfo
	name      string // for errors and logs: no userinfo, no query
	header    http.Header
	influx    bool     // Encoding is EncodingInfluxLine
	secrets   []string // blanked out of response excerpts
	timeout   time.Duration
	gateway   string
	epoch     string
	transport *http.Transport
	client    *http.Client
	log       *slog.Logger
	reached   atomic.Bool // the last post got an answer that was not 5xx
}

// NewHTTP checks cfg and returns a publisher. It does no I/O.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := httpParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("uplink: http: %w", err)
	}
	name := httpRedactURL(u)
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
	h.transport = httpNewTransport(cfg.TLS)
	h.client = httpNewClient(h.transport)
	if cfg.TLS != nil && cfg.TLS.InsecureSkipVerify {
		h.log.Warn("uplink: http: TLS server verification is OFF", "upstream", name)
	}
	return h, nil
}

// Name returns the upstream's URL without credentials and without its query,
// for logs and statistics.
func (h *HTTP) Name() string { return h.name }

// Close closes the idle connections of the publisher's pool. Posts still in
// flight finish; a post after Close opens a new connection.
func (h *HTTP) Close() error {
	h.transport.CloseIdleConnections()
	return nil
}

// post sends one packet or a batch and reports whether the upstream took it.
//
// Body: with one packet, the packet's JSON as it is; with several, a JSON
// array of them in order, "[p1,p2,…]". Content-Type is application/json.
// Every packet must be valid JSON, or nothing is sent and the error says
// so. With [EncodingInfluxLine] the body is line protocol instead, one
// line per packet (see [HTTPConfig.Encoding] and
// docs/influx.md); a batch with no line to write is acknowledged unsent.
//
// seqs are the packets' sequence numbers, one per packet, in the same order;
// the Idempotency-Key header names the batch by its first and last:
//
//	Idempotency-Key: <gateway>:<epoch>:<firstSeq>-<lastSeq>
//
// unquoted (gw-01:7f3a:1200-1299), as ingest platforms compare the header's
// value byte for byte; draft-ietf-httpapi-idempotency-key-header's quoted
// sf-string form would hand them the quotes as part of the key.
// The key must never name two different payloads: a batch that is resent
// must be resent whole (a server may answer 422 to the same key with another
// payload, and 422 is permanent).
//
// post returns nil on a 2xx answer and only then. Otherwise the error
// names the URL (without credentials), the status and an excerpt of the
// response body, and its Retry-After if any. When ctx has no
// deadline, the config's Timeout bounds the whole exchange.
func (h *HTTP) post(ctx context.Context, seqs []uint64, batch [][]byte) error {
	if len(batch) == 0 {
		return fmt.Errorf("uplink: http %s: empty batch", h.name)
	}
	if len(seqs) != len(batch) {
		return fmt.Errorf("uplink: http %s: %d seqs for %d packets", h.name, len(seqs), len(batch))
	}
	body, err := h.body(seqs, batch)
	if err != nil {
		return fmt.Errorf("%w (not sent to %s)", err, h.name)
	}
	if len(body) == 0 {
		return nil // line protocol: no packet had a field to write
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	key := idempotencyKey(h.gateway, h.epoch, seqs[0], seqs[len(seqs)-1])
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return &httpError{Method: http.MethodPost, URL: h.name, Err: httpUnwrapURLError(err)}
	}
	for k, v := range h.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", h.contentType())
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		err = httpUnwrapURLError(err)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v: %w", time.Since(start).Round(time.Millisecond), err)
		}
		h.log.Debug("uplink: http post failed", "upstream", h.name, "packets", len(batch),
			"key", key, "elapsed", time.Since(start), "err", err)
		h.reached.Store(false)
		return &httpError{Method: http.MethodPost, URL: h.name, Err: err}
	}
	herr := httpCheckResponse(http.MethodPost, h.name, resp, h.secrets)
	h.log.Debug("uplink: http post", "upstream", h.name, "packets", len(batch),
		"key", key, "status", resp.StatusCode, "elapsed", time.Since(start))
	if herr != nil {
		if resp.StatusCode >= 500 {
			h.reached.Store(false)
		}
		return herr
	}
	if !h.reached.Swap(true) {
		h.log.Info("http upstream reached", "upstream", h.name)
	}
	return nil
}

// idempotencyKey returns the key that names a batch: "gateway:epoch:first-last",
// e.g. "gw-01:7f3a:1200-1299". The header carries it as it is, unquoted.
// With the buffer's epoch, random per buffer file, a key is never reused for
// another batch as long as the caller never sends two different sets of
// packets under the same first and last seq.
func idempotencyKey(gateway, epoch string, first, last uint64) string {
	b := make([]byte, 0, len(gateway)+len(epoch)+44)
	b = append(b, gateway...)
	b = append(b, ':')
	b = append(b, epoch...)
	b = append(b, ':')
	b = strconv.AppendUint(b, first, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, last, 10)
	return string(b)
}

// httpError is the error of an HTTP exchange with an upstream that did not end
// in a 2xx: either an answer with another status (StatusCode != 0) or no
// usable answer at all (Err != nil: refused, reset, timeout, TLS, …).
type httpError struct {
	Method     string        // POST for a publish, GET for probes, load and registry
	URL        string        // the upstream, without credentials or query
	StatusCode int           // 0 when no answer came
	Status     string        // e.g. "503 Service Unavailable"
	Body       string        // up to 200 bytes of the answer's body, secrets blanked
	RetryAfter time.Duration // the answer's Retry-After, 0 if none (a hint, ≤ 24h)
	Err        error         // why no answer came; nil when StatusCode != 0
}

func (e *httpError) Error() string {
	var b strings.Builder
	b.WriteString("uplink: http ")
	b.WriteString(e.Method)
	b.WriteByte(' ')
	b.WriteString(e.URL)
	b.WriteString(": ")
	if e.StatusCode == 0 {
		if e.Err != nil {
			b.WriteString(e.Err.Error())
		} else {
			b.WriteString("no answer")
		}
		return b.String()
	}
	if e.Status != "" {
		b.WriteString(e.Status)
	} else {
		b.WriteString(strconv.Itoa(e.StatusCode))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	if e.Body != "" {
		b.WriteString(": ")
		b.WriteString(strconv.Quote(e.Body))
	}
	return b.String()
}

// Unwrap returns the transport error, if any.
func (e *httpError) Unwrap() error { return e.Err }

// httpBatchBody returns the body of a POST: the packet itself, or a JSON
// array of the packets.
func httpBatchBody(seqs []uint64, batch [][]byte) ([]byte, error) {
	n := 1 + len(batch)
	for i, p := range batch {
		if !json.Valid(p) {
			return nil, fmt.Errorf("%w: seq %d", errInvalidPacket, seqs[i])
		}
		n += len(p)
	}
	if len(batch) == 1 {
		return batch[0], nil
	}
	body := make([]byte, 0, n)
	body = append(body, '[')
	for i, p := range batch {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, p...)
	}
	return append(body, ']'), nil
}

// httpCheckResponse consumes resp's body so that its connection can be
// reused, and returns nil for a 2xx or an *httpError with an excerpt.
func httpCheckResponse(method, name string, resp *http.Response, secrets []string) *httpError {
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, httpDrainLimit))
		return nil
	}
	head := make([]byte, httpExcerptLen)
	n, _ := io.ReadFull(resp.Body, head)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, httpDrainLimit))
	return &httpError{
		Method:     method,
		URL:        name,
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Body:       httpExcerpt(head[:n], secrets),
		RetryAfter: httpParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// httpParseRetryAfter reads delta-seconds or an HTTP date; 0 when absent,
// unreadable or past; capped at httpMaxRetryAfter.
func httpParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if strings.Trim(v, "0123456789") == "" { // delta-seconds
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(httpMaxRetryAfter/time.Second) {
			return httpMaxRetryAfter // only a range error is possible
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, httpMaxRetryAfter))
}

// httpCheckKeyPart requires a non-empty printable-ASCII string, which a
// header carries unchanged.
func httpCheckKeyPart(field, v string) error {
	if v == "" {
		return fmt.Errorf("%s is required (it is part of the Idempotency-Key)", field)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return fmt.Errorf("%s %q: only printable ASCII may go into an Idempotency-Key", field, v)
		}
	}
	return nil
}

// httpParseURL parses an http(s) URL; its errors, without a prefix, never
// show the URL's userinfo or query.
func httpParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("bad URL: %w", httpUnwrapURLError(err))
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s: scheme must be http or https", httpRedactURL(u))
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%s: no host", httpRedactURL(u))
	}
	return u, nil
}

// httpBasicAuthFromURL returns a copy of header (nil: a new one) with basic
// auth from u's userinfo, unless header already has an Authorization, and
// removes the userinfo from u.
func httpBasicAuthFromURL(u *url.URL, header http.Header) http.Header {
	header = header.Clone()
	if header == nil {
		header = make(http.Header)
	}
	if u.User != nil {
		if header.Get("Authorization") == "" {
			pass, _ := u.User.Password()
			token := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
			header.Set("Authorization", "Basic "+token)
		}
		u.User = nil
	}
	return header
}

// httpNewTransport returns a transport with a small keep-alive pool for one
// upstream: a gateway talks to each upstream over a few connections at most.
func httpNewTransport(tlsCfg *tls.Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       tlsCfg.Clone(),
		TLSHandshakeTimeout:   10 * time.Second,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4,
		MaxIdleConnsPerHost:   4,
		MaxConnsPerHost:       8,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// httpNewClient returns a client that does not follow redirects: a POST
// redirected elsewhere is a configuration error to see, not to follow (and
// credentials must not travel to another host).
func httpNewClient(t *http.Transport) *http.Client {
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// httpGet does a GET of rawURL (already checked) with header, and returns
// the answer and its body, at most limit bytes (more is an error). Non-2xx
// answers are *httpError, except the statuses listed in pass, which are
// returned with their (empty) body.
func httpGet(ctx context.Context, client *http.Client, rawURL, name string, header http.Header, limit int64, pass ...int) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, nil, &httpError{Method: http.MethodGet, URL: name, Err: httpUnwrapURLError(err)}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, &httpError{Method: http.MethodGet, URL: name, Err: httpUnwrapURLError(err)}
	}
	for _, code := range pass {
		if resp.StatusCode == code {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, httpDrainLimit))
			resp.Body.Close()
			return resp, nil, nil
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, nil, httpCheckResponse(http.MethodGet, name, resp, nil)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return resp, nil, &httpError{Method: http.MethodGet, URL: name, Err: fmt.Errorf("reading the answer: %w", err)}
	}
	if int64(len(body)) > limit {
		return resp, nil, fmt.Errorf("uplink: http GET %s: answer longer than %d bytes", name, limit)
	}
	return resp, body, nil
}
