package brokertest

import (
	"testing"
)

// Subscriber is a Client subscribed, from its start, to one topic filter at
// QoS 1: it takes every message the broker delivers.
type Subscriber struct {
	*Client
}

// Subscribe connects a subscriber to filter (the gateway's "fieldlink/#",
// say) that hands every message to h until the test ends. It fails the
// test when it cannot connect or the broker refuses the subscription. With
// Persistent, h takes too the messages of the session that the broker
// delivers at a connection before the subscription is made again.
func Subscribe(t testing.TB, o Options, filter string, h Handler) *Subscriber {
	t.Helper()
	if o.Name == "" {
		o.Name = "subscriber"
	}
	if o.Persistent {
		o.fallback = h
	}
	c := NewClient(t, o)
	c.Subscribe(t, filter, h)
	return &Subscriber{c}
}
