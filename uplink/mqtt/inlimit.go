package mqtt

import (
	"bufio"
	"fieldlink/uplink/internal/probe"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"
)

// Bounds of what an upstream takes in from its broker. Any client of the
// broker can publish on the topics the gateway subscribes to, key or no
// key: these bound what that costs the gateway.
const (
	// defaultSubscriptionMax is the largest payload a [Subscription]
	// takes when it does not say (a command is at most 4 KiB).
	defaultSubscriptionMax = 4 << 10
	// mqttInboundBytes bounds the bytes of the messages waiting in an
	// upstream's queues (its subscriptions' and its hook's, see
	// [Upstream.Admit]) together; a message that would pass it is
	// dropped like one that finds its queue full. Admitted messages are
	// not counted: a flood must not take their room; their own queue
	// bounds them (subscriptionQueue × MaxSize), as the one-slot mailbox
	// bounds load reports.
	mqttInboundBytes = 256 << 10
	// mqttRefusalLogEvery is how often at most a kind of refusal is
	// logged per upstream; the others are counted, and the next line
	// says how many.
	mqttRefusalLogEvery = 10 * time.Second
)

// mqttLimitConn is the socket paho reads the broker's packets from, with
// each PUBLISH whose payload is over limit made empty on the way: paho
// reads a whole packet into memory before any handler sees it, so a
// bound checked later holds nothing back. The packet keeps its topic,
// flags and packet id (a QoS 1 message is still acknowledged, and its
// handler sees an empty payload); its payload is discarded as it streams
// in, never held. Every other packet passes as it is. Only paho's reader
// goroutine calls Read.
type mqttLimitConn struct {
	net.Conn
	br     *bufio.Reader
	limit  int
	refuse func(topic string, size int) // called for each payload dropped

	hdr  []byte // the fixed header being read
	out  []byte // bytes for paho before the rest of the packet
	body int    // bytes of the packet left to pass through
	skip int    // bytes of a refused payload left to discard
}

func newMQTTLimitConn(nc net.Conn, limit int, refuse func(topic string, size int)) *mqttLimitConn {
	return &mqttLimitConn{Conn: nc, br: bufio.NewReaderSize(nc, 16<<10), limit: limit, refuse: refuse}
}

func (c *mqttLimitConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		switch {
		case len(c.out) > 0:
			n := copy(p, c.out)
			c.out = c.out[n:]
			return n, nil
		case c.skip > 0:
			n, err := c.br.Discard(c.skip)
			c.skip -= n
			if err != nil {
				return 0, err
			}
		case c.body > 0:
			n, err := c.br.Read(p[:min(len(p), c.body)])
			c.body -= n
			return n, err
		default:
			if err := c.next(); err != nil {
				return 0, err
			}
		}
	}
}

// next reads the next packet's fixed header and decides what passes.
func (c *mqttLimitConn) next() error {
	for len(c.hdr) < 2 || c.hdr[len(c.hdr)-1]&0x80 != 0 {
		if len(c.hdr) == 5 { // a remaining length of more than 4 bytes: malformed, paho says so
			c.out, c.hdr = c.hdr, nil
			return nil
		}
		b, err := c.br.ReadByte()
		if err != nil {
			return err // c.hdr keeps what was read
		}
		c.hdr = append(c.hdr, b)
	}
	hdr := c.hdr
	c.hdr = nil
	rl, mult := 0, 1
	for _, b := range hdr[1:] {
		rl += int(b&0x7f) * mult
		mult *= 128
	}
	if hdr[0]>>4 != 3 || rl <= c.limit { // not a PUBLISH, or small enough whatever its topic
		c.out, c.body = hdr, rl
		return nil
	}
	// A PUBLISH that may be over: its variable header (topic, packet id)
	// decides, and is kept; at most 64 KiB.
	var tl [2]byte
	if _, err := io.ReadFull(c.br, tl[:]); err != nil {
		return err
	}
	tlen := int(tl[0])<<8 | int(tl[1])
	vh := 2 + tlen
	if qos := hdr[0] >> 1 & 3; qos > 0 {
		vh += 2
	}
	if vh > rl { // malformed: paho says so
		c.out, c.body = append(hdr, tl[:]...), rl-2
		return nil
	}
	rest := make([]byte, vh)
	copy(rest, tl[:])
	if _, err := io.ReadFull(c.br, rest[2:]); err != nil {
		return err
	}
	payload := rl - vh
	if payload <= c.limit {
		c.out, c.body = append(hdr, rest...), payload
		return nil
	}
	c.out = append(append([]byte{hdr[0]}, mqttRemainingLength(vh)...), rest...)
	c.skip = payload
	c.refuse(string(rest[2:2+tlen]), payload)
	return nil
}

// mqttRemainingLength encodes n as an MQTT remaining length.
func mqttRemainingLength(n int) []byte {
	var b []byte
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// inboundStats count the messages an upstream refused to take in from
// its broker (for the status page and the metrics).
type inboundStats struct {
	// Oversize: payloads over the connection's limit, dropped as they
	// streamed in, or over their subscription's.
	Oversize uint64
	// NotAdmitted: messages a subscription's Admit refused (a command
	// without a valid signature); they wait in the ordinary queue, if it
	// has room.
	NotAdmitted uint64
	// Dropped: messages dropped because their queue, or the bytes waiting
	// in all of the upstream's queues, was full.
	Dropped uint64
}

// Inbound returns the upstream's counts of refused messages. Safe for
// concurrent use.
func (m *mqttUpstream) Inbound() inboundStats {
	return inboundStats{Oversize: m.oversize.n.Load(), NotAdmitted: m.notAdmitted.n.Load(), Dropped: m.dropped.n.Load()}
}

// inboundLimit is the largest payload any topic of m takes: the
// connection drops every payload over it.
func (m *mqttUpstream) inboundLimit() int {
	limit := 0
	if m.cfg.LoadTopic != "" {
		limit = probe.LoadMaxBytes
	}
	for _, sub := range m.subs {
		limit = max(limit, sub.max)
	}
	if m.hook != nil {
		limit = max(limit, m.hook.InboundLimit())
	}
	return limit
}

// refusals counts one kind of refused message and logs it at most every
// mqttRefusalLogEvery.
type refusals struct {
	n      atomic.Uint64
	logged atomic.Uint64 // n when last logged
	at     atomic.Int64  // when last logged (Unix ns)
}

// note counts a refusal and logs it with args unless one was logged
// within mqttRefusalLogEvery.
func (r *refusals) note(log *slog.Logger, msg string, args ...any) {
	n := r.n.Add(1)
	now := time.Now().UnixNano()
	last := r.at.Load()
	if last != 0 && now-last < int64(mqttRefusalLogEvery) || !r.at.CompareAndSwap(last, now) {
		return
	}
	prev := r.logged.Swap(n)
	log.Warn(msg, append(args, "refused_since_last_logged", n-prev, "refused_total", n)...)
}

// take reserves n bytes of the upstream's inbound budget; false if they
// would pass mqttInboundBytes.
func (m *mqttUpstream) take(n int) bool {
	if m.queued.Add(int64(n)) > mqttInboundBytes {
		m.queued.Add(-int64(n))
		return false
	}
	return true
}

// give returns n bytes taken from the inbound budget.
func (m *mqttUpstream) give(n int) { m.queued.Add(-int64(n)) }
