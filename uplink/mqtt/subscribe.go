package mqtt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"fieldlink/uplink/internal/probe"
	paho "github.com/eclipse/paho.mqtt.golang"
)

// onLoadMessage runs on paho's router goroutine: it must not block, so it
// leaves the payload in a one-slot mailbox (the latest report wins).
func (m *mqttUpstream) onLoadMessage(_ paho.Client, msg paho.Message) {
	if len(msg.Payload()) > probe.LoadMaxBytes {
		m.oversize.note(m.log, "load report over the size limit refused", "upstream", m.name, "topic", msg.Topic(),
			"bytes", len(msg.Payload()), "limit", probe.LoadMaxBytes)
		return
	}
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

func (m *mqttUpstream) dispatchLoads(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-m.loads:
			m.cfg.OnLoad(p)
		}
	}
}

// subscriptionQueue is how many messages may wait for a handler per
// upstream, in each of a subscription's two queues.
const subscriptionQueue = 16

type subscription struct {
	topic  string
	handle func([]byte)
	admit  func([]byte) bool
	max    int
	// queue holds messages in the upstream's inbound budget (see
	// MQTT.take); admitted those Admit let through, bounded by their
	// count and size alone.
	queue, admitted chan []byte
}

// deliver runs on paho's router goroutine: it must not block.
func (m *mqttUpstream) deliver(sub *subscription, msg paho.Message) {
	if msg.Retained() {
		m.log.Warn("retained message dropped: commands and requests are never run late (clear the retained message on the broker)", "upstream", m.name, "topic", msg.Topic())
		return
	}
	p := msg.Payload()
	switch {
	case len(p) == 0:
		// Nothing to run; what the connection refused arrives so.
		m.log.Debug("empty message dropped", "upstream", m.name, "topic", msg.Topic())
		return
	case len(p) > sub.max:
		m.oversize.note(m.log, "message over the size limit refused", "upstream", m.name, "topic", msg.Topic(), "bytes", len(p), "limit", sub.max)
		return
	}
	if sub.admit != nil {
		if sub.admit(p) {
			select {
			case sub.admitted <- append([]byte(nil), p...):
			default:
				m.dropped.note(m.log, "admitted message dropped: too many waiting", "upstream", m.name, "topic", sub.topic, "waiting", subscriptionQueue)
			}
			return
		}
		m.notAdmitted.note(m.log, "message not admitted (no valid signature): handled only if there is room", "upstream", m.name, "topic", sub.topic)
	}
	m.enqueue("message", sub.topic, p, subscriptionQueue, func(b []byte) bool {
		select {
		case sub.queue <- b:
			return true
		default:
			return false
		}
	})
}

// enqueue hands put a copy of p if the upstream's inbound byte budget takes
// it, and gives the bytes back when put has no room; each refusal is
// counted and logged as what's (a subscription's messages, a Sparkplug
// command), waiting being put's room.
func (m *mqttUpstream) enqueue(what, topic string, p []byte, waiting int, put func([]byte) bool) {
	if !m.take(len(p)) {
		m.dropped.note(m.log, what+" dropped: too many bytes waiting", "upstream", m.name, "topic", topic, "waiting_bytes", mqttInboundBytes)
		return
	}
	if !put(append([]byte(nil), p...)) {
		m.give(len(p))
		m.dropped.note(m.log, what+" dropped: too many waiting", "upstream", m.name, "topic", topic, "waiting", waiting)
	}
}

// dispatch hands sub's messages to its handler, admitted ones first,
// until ctx ends.
func (m *mqttUpstream) dispatch(ctx context.Context, sub *subscription) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-sub.admitted:
			sub.handle(p)
			continue
		default:
		}
		select {
		case <-ctx.Done():
			return
		case p := <-sub.admitted:
			sub.handle(p)
		case p := <-sub.queue:
			m.give(len(p))
			sub.handle(p)
		}
	}
}

// PublishTo publishes payload on topic at QoS 1, outside the packet
// stream (command results, state reports), and returns once the broker
// acknowledged it, or with the error that stopped it.
func (m *mqttUpstream) PublishTo(ctx context.Context, topic string, payload []byte, retained bool) error {
	_, err := m.publishTo(ctx, topic, payload, retained)
	return err
}

// publishTo is PublishTo, and also reports whether the broker closed the
// connection before its PUBACK came (the connection was lost to an EOF or
// a reset, not dropped by this side).
func (m *mqttUpstream) publishTo(ctx context.Context, topic string, payload []byte, retained bool) (closedByBroker bool, err error) {
	c := m.conn()
	if c == nil {
		return false, m.notConnected()
	}
	if err := m.await(ctx, c, c.cl.Publish(topic, 1, retained, payload), m.cfg.PublishTimeout); err != nil {
		lost := errors.Is(err, errMQTTConnLost) && !errors.Is(err, errMQTTAckTimeout) && ctx.Err() == nil
		if lost {
			select { // the token fails as paho finds the loss, before its handler runs
			case <-c.lost:
				lost = errors.Is(c.lostErr, io.EOF) || errors.Is(c.lostErr, syscall.ECONNRESET)
			case <-time.After(m.cfg.PublishTimeout):
				lost = false
			}
		}
		return lost, fmt.Errorf("uplink: mqtt %s: publish on %s: %w", m.name, topic, err)
	}
	return false, nil
}

// probePublish is a publish probe's message: empty, not retained.
func (m *mqttUpstream) ProbePublish(ctx context.Context, topic string) (closedByBroker bool, err error) {
	return m.publishTo(ctx, topic, nil, false)
}
