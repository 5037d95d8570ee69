package http

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"fieldlink/buffer"
	"fieldlink/uplink"
	"fieldlink/uplink/internal/errnote"
	"fieldlink/uplink/internal/httpc"
)

// Sender adapts an HTTP publisher to the delivery loop: one POST per
// batch.
type Sender struct {
	h      *HTTP
	batch  int
	window int
	up     atomic.Bool
	probe  atomic.Bool  // a probe result arrived
	noted  errnote.Last // the latest failed probe or connection
}

// NewSender returns the sender of h: batches of up to batch records, up
// to window POSTs in flight (each at least 1).
func NewSender(h *HTTP, batch, window int) *Sender {
	return &Sender{h: h, batch: max(batch, 1), window: max(window, 1)}
}

// Name implements Sender.
func (s *Sender) Name() string { return s.h.Name() }

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
func (s *Sender) Send(ctx context.Context, batch []buffer.Record) error {
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
	var he *httpc.Error
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

// refusesPackets is the rule of [Sender.Send]: whether err says that the
// upstream refuses the packets themselves.
func refusesPackets(err error) bool {
	if errors.Is(err, errInvalidPacket) {
		return true
	}
	var he *httpc.Error
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
func (s *Sender) MaxBatch() int { return s.batch }

// Window implements Sender.
func (s *Sender) Window() int { return s.window }

// Up implements Sender: true until a probe says otherwise.
func (s *Sender) Up() bool { return !s.probe.Load() || s.up.Load() }

// ProbeResult records a latency probe's outcome for Up.
func (s *Sender) ProbeResult(err error) {
	s.up.Store(err == nil)
	s.probe.Store(true)
	if err != nil {
		s.noted.Note(uplink.Explain(err))
	}
}

// LastError is the latest failed probe (or connection refused to a
// delivery) in words, and when; "" before the first.
func (s *Sender) LastError() (string, time.Time) { return s.noted.Get() }
