package mqtt

import (
	"context"
	"crypto/tls"
	"sync/atomic"
	"time"

	"fieldlink/uplink"
	paho "github.com/eclipse/paho.mqtt.golang"
)

// The seam of a kind built on the MQTT connection: [Open] makes the connection with the kind's [Hook] on it, which
// the connection calls at each step of its life, so that it knows nothing
// of the kind; the kind drives the connection through [Upstream] and, once
// connected, [Link]. Nothing here is needed by a program that only
// connects MQTT upstreams: [Kind] does that.

// Hook is what a kind built on the connection puts on it: the connection
// calls it at each step of its life rather than knowing the kind. Will,
// Connected, Ending and Down run on the goroutine of the upstream's Run,
// one at a time.
type Hook interface {
	// Will is the last will of the next connection, asked before each
	// connect: the broker publishes it (QoS 1, not retained) when the
	// connection breaks. "" is none.
	Will() (topic string, payload []byte)
	// Connected runs on each connect, once the upstream's own
	// subscriptions are made and its status published: the kind's
	// subscriptions and first messages, on l. An error drops the
	// connection, and Run connects again.
	Connected(ctx context.Context, l *Link) error
	// Ending runs before a clean disconnect of l, once the packets in
	// flight were answered: the kind's last messages. Its [Link.Await]s
	// wait as long as the status topic's "offline" does.
	Ending(l *Link)
	// Down is told each connect that failed and each connection that
	// was lost, before Run waits to connect again.
	Down()
	// InboundLimit is the largest payload the kind's topics take: the
	// connection drops a larger one as it arrives, unless a subscription
	// takes it.
	InboundLimit() int
}

// Open makes the MQTT upstream u of a pool configured by pc as
// [Kind.Open] does, with h on its connection, for a kind built on it:
// the kind takes what it wants of the returned Conn (Run runs the
// upstream, as [Upstream.Run]) and drives the connection through the
// returned Upstream. Set pc.StatusTopic to "off" for a kind that says
// itself whether it is up.
func Open(u uplink.UpstreamConfig, pc uplink.PoolConfig, h Hook) (*uplink.Conn, *Upstream, error) {
	c, m, err := open(u, pc, h)
	if err != nil {
		return nil, nil, err
	}
	return c, &Upstream{m}, nil
}

// Upstream is an MQTT upstream as the kind built on it sees it.
type Upstream struct{ m *mqttUpstream }

// Another makes another upstream like u (its client id, window, topics,
// timeouts, subscriptions and backoff), with h on its connection, at url
// with these credentials: for a kind whose one client connects to one of
// several servers at a time, where a second client id would be a second
// client. It has no load topic: an upstream's load reports are its
// first connection's.
func (u *Upstream) Another(url, username, password string, tlsConf *tls.Config, h Hook) (*Upstream, error) {
	mc := u.m.cfg
	mc.URL, mc.Username, mc.Password, mc.TLS = url, username, password, tlsConf
	mc.LoadTopic, mc.OnLoad = "", nil
	o, err := newMQTT(mc)
	if err != nil {
		return nil, err
	}
	o.backoffMin, o.backoffMax, o.stallAge = u.m.backoffMin, u.m.backoffMax, u.m.stallAge
	o.hook = h
	return &Upstream{o}, nil
}

// Run keeps the upstream connected until ctx ends, as its Conn's Run;
// it may run again once it returned, so that a kind with several
// upstreams runs each in turn.
func (u *Upstream) Run(ctx context.Context) { u.m.Run(ctx) }

// Name is the upstream's name in logs and errors, as its sender's.
func (u *Upstream) Name() string { return u.m.Name() }

// LastError is the latest reason a connection failed or ended, in
// words, and when, as its sender says it: for the kind's sender.
func (u *Upstream) LastError() (string, time.Time) { return u.m.lastError() }

// NotConnected is the error of a send that finds no connection it can
// use, naming the upstream and its last error, as its own sends say it.
func (u *Upstream) NotConnected() error { return u.m.notConnected() }

// Backoff is the upstream's wait before connect attempt n+1 (from 0):
// for a kind that waits between rounds of its upstreams.
func (u *Upstream) Backoff(n int) time.Duration { return u.m.backoff(n) }

// Admit takes a message the broker delivered on one of the hook's
// subscriptions into a queue of the hook's, by the rules of the
// upstream's own subscriptions, so that a flood on the kind's topics
// costs no more than one on the commands': a payload over limit bytes is
// refused, one that would pass the bytes the upstream's queues may hold
// is dropped; else put gets a copy, whose bytes count until [Upstream.Give],
// and reports false if its queue (of waiting messages) is full: the
// message is dropped. Each refusal is counted and logged, at most every
// 10 s per kind of refusal, as what (the kind's word for its messages)
// with the topic and waiting (put's queue length) or the bytes. It must not block: it runs on paho's goroutine.
func (u *Upstream) Admit(what, topic string, payload []byte, limit, waiting int, put func([]byte) bool) {
	m := u.m
	if len(payload) > limit {
		m.oversize.note(m.log, what+" over the size limit refused", "upstream", m.name, "topic", topic, "bytes", len(payload), "limit", limit)
		return
	}
	m.enqueue(what, topic, payload, waiting, put)
}

// Give returns the bytes of a message [Upstream.Admit] queued, once it was
// taken off its queue.
func (u *Upstream) Give(n int) { u.m.give(n) }

// Link is one connection of an upstream, as its hook sees it: from
// [Hook.Connected] on, until it is lost or dropped.
type Link struct {
	m       *mqttUpstream
	c       *mqttConn
	timeout atomic.Int64 // of Await: the publish timeout, shorter once ending
}

// Client is the connection's paho client, for the kind's own publishes,
// subscriptions and unsubscriptions, whose tokens it waits for with
// [Link.Await]. Each connection has a client of its own, used once.
func (l *Link) Client() paho.Client { return l.c.cl }

// Await waits for tok, of l's client, by the connection's rules: within
// the upstream's publish timeout, past which the connection is dropped (a
// stuck link must not hold the kind), and failing at once when the
// connection is lost. A token of a QoS 0 publish completes once written.
func (l *Link) Await(ctx context.Context, tok paho.Token) error {
	return l.m.await(ctx, l.c, tok, time.Duration(l.timeout.Load()))
}

// Drop ends the connection for err (the kind finds it of no use any
// more): the broker publishes the will, and Run connects again.
func (l *Link) Drop(err error) { l.c.drop(err) }

// Up reports whether l is its upstream's connection now, up: what was
// published on l reached the broker's session, and what is published on
// it may.
func (l *Link) Up() bool { return l.m.conn() == l.c }
