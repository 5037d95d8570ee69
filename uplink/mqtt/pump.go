package mqtt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

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
// Calling paho from here rather than from publish's callers matters:
// paho's Publish can block for up to its write timeout when the
// connection drops under it, and callers must learn of the loss at once.
// The oldest packet without its PUBACK after PublishTimeout has the
// connection dropped. When c.closing is closed, the pump answers the
// requests not yet sent, waits a little for the PUBACKs of those in
// flight, and returns.
func (m *mqttUpstream) pump(c *mqttConn) {
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
				<-c.slots                 // first, so that all are free once every caller returned
				if e.tok.Error() != nil { // paho fails the tokens as it finds the loss
					c.noteWait(time.Since(e.sent))
				}
				e.r.res <- m.tokenErr(e.tok)
				*e = mqttInflight{}
				head, n = (head+1)%len(ring), n-1
			}
		case <-timer.C:
			armed = -1
			c.drop(fmt.Errorf("%w (%v)", errMQTTAckTimeout, m.cfg.PublishTimeout))
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
			m.answerAll(ring, head, n, fmt.Errorf("uplink: mqtt %s: %w: stopped", m.name, errMQTTConnLost))
			return
		case <-c.lost:
			c.noteWait(oldestWait(ring, head, n))
			m.answerAll(ring, head, n, m.lostErr(c))
			return
		}
	}
}

// answerAll gives the n requests in flight from ring[head] their outcome
// when the connection ends: nil for those whose PUBACK came, else err.
func (m *mqttUpstream) answerAll(ring []mqttInflight, head, n int, err error) {
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

// oldestWait is how long the oldest of the n requests in flight from
// ring[head] whose PUBACK has not come had waited by now; 0 if none.
func oldestWait(ring []mqttInflight, head, n int) time.Duration {
	for ; n > 0; n-- {
		e := ring[head]
		if !mqttTokenDone(e.tok) || e.tok.Error() != nil {
			return time.Since(e.sent)
		}
		head = (head + 1) % len(ring)
	}
	return 0
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
// that does, or in the last error that publish's error quotes.
func (m *mqttUpstream) await(ctx context.Context, c *mqttConn, tok paho.Token, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	sent := time.Now()
	select {
	case <-tok.Done():
		if err := awaitErr(tok); err != nil {
			c.noteWait(time.Since(sent)) // failed by the loss of the connection
			return err
		}
		return nil
	case <-c.lost:
		c.noteWait(time.Since(sent))
		select { // the PUBACK may have come just before the loss
		case <-tok.Done():
			return awaitErr(tok)
		default:
		}
		return fmt.Errorf("%w: %v", errMQTTConnLost, c.lostErr)
	case <-t.C:
		err := fmt.Errorf("%w (%v)", errMQTTAckTimeout, timeout)
		c.drop(err)
		return err
	case <-ctx.Done():
		c.abandon(tok, sent) // still in flight: a stall may end the connection under it
		return ctx.Err()
	}
}

// abandon keeps a publish whose caller stopped waiting (a probe's short
// deadline) among those the connection's loss may find unanswered.
func (c *mqttConn) abandon(tok paho.Token, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abandoned = slices.DeleteFunc(c.abandoned, func(e mqttInflight) bool { return mqttTokenDone(e.tok) })
	c.abandoned = append(c.abandoned, mqttInflight{tok: tok, sent: sent})
}

// noteAbandoned notes the wait of the oldest abandoned publish that had no
// PUBACK when the connection was lost.
func (c *mqttConn) noteAbandoned() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.abandoned {
		if !mqttTokenDone(e.tok) || e.tok.Error() != nil {
			c.noteWait(time.Since(e.sent))
		}
	}
}

// noteWait records that a request had waited d for its answer when the
// connection was lost, if that is the longest so far.
func (c *mqttConn) noteWait(d time.Duration) {
	for {
		old := c.waited.Load()
		if int64(d) <= old || c.waited.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// awaitErr is a completed token's error, without the upstream's name.
func awaitErr(tok paho.Token) error {
	if err := tok.Error(); err != nil {
		return fmt.Errorf("%w: %v", errMQTTConnLost, err)
	}
	return nil
}

func (m *mqttUpstream) lostErr(c *mqttConn) error {
	if errors.Is(c.lostErr, errMQTTAckTimeout) {
		return fmt.Errorf("uplink: mqtt %s: %w: %w", m.name, errMQTTConnLost, c.lostErr)
	}
	return fmt.Errorf("uplink: mqtt %s: %w: %v", m.name, errMQTTConnLost, c.lostErr)
}

func (m *mqttUpstream) tokenErr(tok paho.Token) error {
	err := tok.Error()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, paho.ErrNotConnected):
		return m.notConnected()
	default:
		return fmt.Errorf("uplink: mqtt %s: %w: %v", m.name, errMQTTConnLost, err)
	}
}

func (m *mqttUpstream) notConnected() error {
	if p := m.lastErr.Load(); p != nil {
		return fmt.Errorf("uplink: mqtt %s: %w (last error: %v)", m.name, errMQTTNotConnected, *p)
	}
	return fmt.Errorf("uplink: mqtt %s: %w", m.name, errMQTTNotConnected)
}
