package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"fieldlink/uplink/internal/httpc"
)

// defaultHTTPTimeout bounds one post whose ctx has no deadline.
const defaultHTTPTimeout = 10 * time.Second

// errInvalidPacket is returned by post when a packet of the batch is
// not valid JSON. Nothing is sent; resending will not make the packet valid,
// so [Sender.Send] counts it as refused.
var errInvalidPacket = errors.New("uplink: packet is not valid JSON")

// HTTP publishes packets to one HTTP(S) ingest endpoint by POST. A 2xx answer
// acknowledges the packets; every other outcome is an error (one naming
// the status, or an invalid packet). Which errors refuse the packets and
// which are the upstream's failure is [Sender.Send]'s rule; retrying,
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
	influx    bool     // Encoding is uplink.EncodingInfluxLine
	precision string   // of the lines' times with influx: ms or s
	secrets   []string // blanked out of response excerpts
	timeout   time.Duration
	gateway   string
	epoch     string
	transport *http.Transport
	client    *http.Client
	log       *slog.Logger
	reached   atomic.Bool // the last post got an answer that was not 5xx
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
// so. With [uplink.EncodingInfluxLine] the body is line protocol instead, one
// line per packet (see [Config.Encoding] and
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
		return httpc.Failed(http.MethodPost, h.name, h.peer(), httpc.UnwrapURLError(err))
	}
	for k, v := range h.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", h.contentType())
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		err = httpc.UnwrapURLError(err)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v: %w", time.Since(start).Round(time.Millisecond), err)
		}
		h.log.Debug("uplink: http post failed", "upstream", h.name, "packets", len(batch),
			"key", key, "elapsed", time.Since(start), "err", err)
		h.reached.Store(false)
		return httpc.Failed(http.MethodPost, h.name, h.peer(), err)
	}
	herr := httpc.CheckResponse(http.MethodPost, h.name, h.peer(), resp, h.secrets)
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

// peer names the server in the words for its errors: InfluxDB for an
// influx_line upstream, "" (the server) otherwise.
func (h *HTTP) peer() string {
	if h.influx {
		return "InfluxDB"
	}
	return ""
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
