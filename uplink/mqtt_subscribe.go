package uplink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

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

// subscriptionQueue is how many messages may wait for a handler per
// upstream.
const subscriptionQueue = 16

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
		m.log.Warn("message dropped: too many waiting", "upstream", m.name, "topic", sub.topic, "waiting", subscriptionQueue)
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
	_, err := m.publishTo(ctx, topic, payload, retained)
	return err
}

// publishTo is PublishTo, and also reports whether the broker closed the
// connection before its PUBACK came (the connection was lost to an EOF or
// a reset, not dropped by this side).
func (m *MQTT) publishTo(ctx context.Context, topic string, payload []byte, retained bool) (closedByBroker bool, err error) {
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
