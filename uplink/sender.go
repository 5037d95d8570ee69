package uplink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/buffer"
)

// The senders adapt the publishers (MQTT, HTTP) to the delivery loop's
// [Sender].

// MQTTSender adapts an MQTT publisher to the delivery loop: one record
// per Send, pipelined up to the window.
type MQTTSender struct {
	m      *MQTT
	window int

	mu   sync.Mutex
	vars map[string]map[string]string // by DataType and DeviceId, to spare a map per publish
}

// topicVars returns the (shared, read-only) template values of a packet.
func (s *MQTTSender) topicVars(data []byte) map[string]string {
	dt, dev := headField(data, `"DataType":"`), headField(data, `"DeviceId":"`)
	key := dt + "\x00" + dev
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[key]
	if !ok {
		if s.vars == nil || len(s.vars) > 4096 {
			s.vars = map[string]map[string]string{}
		}
		v = map[string]string{"data_type": dt, "device": dev}
		s.vars[key] = v
	}
	return v
}

// NewMQTTSender returns the sender of m with up to window publishes in
// flight; window ≤ 0 means m's own [MQTTConfig.Window].
func NewMQTTSender(m *MQTT, window int) *MQTTSender {
	if window <= 0 {
		window = m.window()
	}
	return &MQTTSender{m: m, window: window}
}

// Name implements Sender.
func (s *MQTTSender) Name() string { return s.m.Name() }

// Send publishes each record and waits for its PUBACK.
func (s *MQTTSender) Send(ctx context.Context, batch []buffer.Record) error {
	for _, r := range batch {
		if err := s.m.publish(ctx, s.topicVars(r.Data), r.Data); err != nil {
			return fmt.Errorf("publish seq %d: %w", r.Seq, err)
		}
	}
	return nil
}

// MaxBatch implements Sender: one record, so each is acked on its own.
func (s *MQTTSender) MaxBatch() int { return 1 }

// Window implements Sender.
func (s *MQTTSender) Window() int { return s.window }

// Up implements Sender: connected.
func (s *MQTTSender) Up() bool { return s.m.Connected() }

// LastError is the latest reason the broker connection failed or ended,
// in words, and when; it stays after a reconnect.
func (s *MQTTSender) LastError() (string, time.Time) { return s.m.lastError() }

// HTTPSender adapts an HTTP publisher to the delivery loop: one POST per
// batch.
type HTTPSender struct {
	h      *HTTP
	batch  int
	window int
	up     atomic.Bool
	probe  atomic.Bool // a probe result arrived
	noted  lastErr     // the latest failed probe or connection
}

// DefaultBatch is how many records one POST carries at most when the site
// file does not say (uplink.batch).
const DefaultBatch = 50

// NewHTTPSender returns the sender of h: batches of up to batch records, up
// to window POSTs in flight (each at least 1).
func NewHTTPSender(h *HTTP, batch, window int) *HTTPSender {
	return &HTTPSender{h: h, batch: max(batch, 1), window: max(window, 1)}
}

// Name implements Sender.
func (s *HTTPSender) Name() string { return s.h.Name() }

// Send posts the batch. Its error tells the delivery loop, by one rule,
// whose fault a failure is:
//
//   - 400 Bad Request, 413 Content Too Large, 422 Unprocessable Content, or
//     a packet that is not JSON (then nothing is sent): the upstream refuses
//     the packets. The error is permanent: the loop resends the batch one
//     record at a time (so a 413 for the batch becomes one per packet at
//     most) and dead-letters each record refused alone.
//   - Any other answer but a 2xx, or no answer: the upstream failed, not the
//     packets, and the records stay in the buffer. That includes 401, 403
//     and 404: a wrong password or path would otherwise dead-letter every
//     packet until someone fixed it; and 408, 409, 425, 429, 5xx (transient)
//     and every 4xx not named above.
//   - A 429 or 503 with Retry-After also carries the wait: the loop sends
//     nothing to this upstream before it has passed (at most 5 minutes).
func (s *HTTPSender) Send(ctx context.Context, batch []buffer.Record) error {
	seqs := make([]uint64, len(batch))
	data := make([][]byte, len(batch))
	for i, r := range batch {
		seqs[i], data[i] = r.Seq, r.Data
	}
	err := s.h.post(ctx, seqs, data)
	switch {
	case err == nil:
		return nil
	case refusesPackets(err):
		return permanentErr{err}
	case dialFailed(err):
		// As good as a failed probe: the upstream is down until a probe
		// answers again, rather than picked (and refused at once, with a
		// latency that flatters it) until the next probe says so.
		s.ProbeResult(err)
	}
	var he *httpError
	if errors.As(err, &he) && he.RetryAfter > 0 &&
		(he.StatusCode == http.StatusTooManyRequests || he.StatusCode == http.StatusServiceUnavailable) {
		return retryAfterErr{err, he.RetryAfter}
	}
	return err
}

// dialFailed reports whether err is a failure to connect at all (refused,
// unreachable), as opposed to one after the request was sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return err != nil && errors.As(err, &op) && op.Op == "dial"
}

// refusesPackets is the rule of [HTTPSender.Send]: whether err says that the
// upstream refuses the packets themselves.
func refusesPackets(err error) bool {
	if errors.Is(err, errInvalidPacket) {
		return true
	}
	var he *httpError
	if !errors.As(err, &he) {
		return false
	}
	switch he.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// permanentErr is an upstream's refusal of the packets.
type permanentErr struct{ error }

func (permanentErr) Permanent() bool { return true }
func (p permanentErr) Unwrap() error { return p.error }

// retryAfterErr is an upstream's failure that asks for a wait.
type retryAfterErr struct {
	error
	wait time.Duration
}

func (e retryAfterErr) RetryAfter() time.Duration { return e.wait }
func (e retryAfterErr) Unwrap() error             { return e.error }

// MaxBatch implements Sender.
func (s *HTTPSender) MaxBatch() int { return s.batch }

// Window implements Sender.
func (s *HTTPSender) Window() int { return s.window }

// Up implements Sender: true until a probe says otherwise.
func (s *HTTPSender) Up() bool { return !s.probe.Load() || s.up.Load() }

// ProbeResult records a latency probe's outcome for Up.
func (s *HTTPSender) ProbeResult(err error) {
	s.up.Store(err == nil)
	s.probe.Store(true)
	s.noted.note(err)
}

// LastError is the latest failed probe (or connection refused to a
// delivery) in words, and when; "" before the first.
func (s *HTTPSender) LastError() (string, time.Time) { return s.noted.get() }
