package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fieldlink/uplink/internal/errnote"
	topictmpl "fieldlink/uplink/internal/topic"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Errors returned by MQTT's publish. Whatever the error, the broker did not
// acknowledge the packet: keep it in the buffer and send it again later.
var (
	// errMQTTNotConnected: there is no connection to the broker at the
	// moment (Run not started, connecting, or backing off after a failure).
	// publish returns it at once; the message names the last failure.
	errMQTTNotConnected = errors.New("not connected")
	// errMQTTConnLost: the connection ended before the broker's PUBACK for
	// the packet arrived. The broker may or may not have the packet.
	errMQTTConnLost = errors.New("connection lost before PUBACK")
	// errMQTTAckTimeout: no PUBACK arrived within PublishTimeout. The
	// connection is then dropped and made again, so that a stuck link does
	// not hold the in-flight window.
	errMQTTAckTimeout = errors.New("no PUBACK in time")
	// ErrClientIDInUse: the broker dropped this gateway's connections
	// just after accepting them, several times in a row, as it does when
	// another client connects with the same client id (two gateways with
	// the same gateway.id, installed from one image): each connection
	// knocks the other off. See [mqttUpstream.Run].
	ErrClientIDInUse = errors.New("another client uses this gateway's MQTT client id")
)

// mqttTakeoverDrops is how many connections in a row the broker must drop
// just after accepting them before [mqttUpstream] says another client uses its id.
const mqttTakeoverDrops = 3

// mqttStallAge is how long a publish must have waited for its PUBACK when
// the broker closes the connection for the close to be the broker's
// stall rather than a takeover: a broker that cannot store a publish in
// time closes the publisher's connection (NATS after 4 s, when its
// stream has no leader), while a takeover closes it at once, whatever is
// in flight. Likewise a connect refused only after this long.
const mqttStallAge = 2 * time.Second

// mqttClientSeq numbers the default client ids.
var mqttClientSeq atomic.Uint64

// mqttUpstream is one MQTT upstream: a broker connection kept up by Run, and
// publish, which returns nil only once the broker's PUBACK for the packet
// arrived.
//
// IMPORTANT: the PUBACK is real because of how connections are made.
// paho can complete a QoS 1 token with no error and no PUBACK when it
// resends after an automatic reconnect (paho issues #563, #458). MQTT never
// lets it: each connection is a fresh paho client with a clean session and
// automatic reconnect off, made by Run's own loop. When a connection drops,
// paho fails every pending token ("connection lost before Publish
// completed"), and those packets are sent again from the buffer by the
// delivery loop, at most Window duplicates per drop.
//
// Each connection has one goroutine, its pump, that hands packets to paho
// and answers publish's callers, in order, as PUBACKs come in; callers
// wait on their answer or on the loss of the connection, whichever comes
// first. publish, Connected, Name and window are safe for concurrent use.
type mqttUpstream struct {
	cfg        mqttConfig
	name       string // the URL, for logs and errors
	addr       string // host:port
	useTLS     bool
	tlsConfig  *tls.Config
	topic      topictmpl.Template
	status     string
	qos        byte
	log        *slog.Logger
	backoffMin time.Duration
	backoffMax time.Duration
	stallAge   time.Duration // mqttStallAge; shorter in tests

	cur     atomic.Pointer[mqttConn]
	lastErr atomic.Pointer[error] // why there is no connection
	noted   errnote.Last          // the latest connection error, kept after a reconnect
	running atomic.Bool
	loads   chan []byte // latest load report, for Run's dispatcher
	subs    []*subscription
	kick    chan struct{} // ends a reconnect wait early (see Kick)
	hook    Hook          // a kind built on the connection, or nil (see [Hook])

	queued                         atomic.Int64 // bytes waiting in the inbound queues (see take)
	oversize, notAdmitted, dropped refusals     // see inboundStats
}

// Kick tells Run that the broker looks reachable again (a latency probe
// answered): a reconnect wait in progress ends now, and the backoff starts
// over, so a recovered broker is used within a probe interval rather than
// after a backoff that grew during the outage. Safe to call at any time.
func (m *mqttUpstream) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Name identifies the upstream in logs and statistics: its URL without
// credentials.
func (m *mqttUpstream) Name() string { return m.name }

// window is the most publishes in flight at once (mqttConfig.Window).
func (m *mqttUpstream) window() int { return m.cfg.Window }

// String is Name, so that printing an MQTT cannot show its password.
func (m *mqttUpstream) String() string { return "MQTT(" + m.name + ")" }

// Connected reports whether a connection is up and announced "online".
// Once it turns false, publish fails at once, not connected, until Run
// has made a new connection.
func (m *mqttUpstream) Connected() bool { return m.conn() != nil }

// conn returns the current connection if it is up, else nil.
func (m *mqttUpstream) conn() *mqttConn {
	c := m.cur.Load()
	if c == nil || !c.cl.IsConnectionOpen() {
		return nil
	}
	select {
	case <-c.lost:
		return nil
	default:
		return c
	}
}

// publish sends payload on the topic made from the template, topicVars
// (data_type, device) and Vars. At QoS 1 it returns nil only when the
// broker's PUBACK for this packet arrived; otherwise an error saying that
// there is no connection (returned at once), that the connection was lost
// before the PUBACK (or dropped for a late one), or ctx's error. At QoS 0 nil means written to the socket. A packet whose
// topic cannot be made (a variable missing, empty, or with '/', '+', '#')
// gets an error whose Permanent method returns true: sending it again
// cannot help.
//
// At most Window publishes are in flight on a connection; more callers
// wait for a slot (or ctx, or the loss of the connection). To pipeline,
// call publish from up to Window goroutines. A caller whose ctx ends
// returns at once, but its packet keeps its slot until its PUBACK or the
// end of the connection. payload is sent as it is, not copied: do not
// modify it after the call, even after an error.
func (m *mqttUpstream) publish(ctx context.Context, topicVars map[string]string, payload []byte) error {
	topic, err := m.topic.Render(topicVars)
	if err != nil {
		return topictmpl.Wrap(fmt.Errorf("uplink: mqtt %s: %w", m.name, err))
	}
	c := m.conn()
	if c == nil {
		return m.notConnected()
	}
	select {
	case c.slots <- struct{}{}:
	default:
		select {
		case c.slots <- struct{}{}:
		case <-c.lost:
			return m.notConnected()
		case <-ctx.Done():
			return fmt.Errorf("uplink: mqtt %s: waiting for a window slot: %w", m.name, ctx.Err())
		}
	}
	// From here the slot is the pump's: it frees it with the outcome.
	r := mqttNewRequest(topic, payload)
	select {
	case c.requests <- r: // never blocks: it holds at most one request per slot
	default:
		<-c.slots
		return m.lostErr(c)
	}
	select {
	case err := <-r.res:
		mqttRequests.Put(r)
		return err
	case <-c.lost:
		select { // the pump may have had the PUBACK just before the loss
		case err := <-r.res:
			mqttRequests.Put(r)
			return err
		default:
		}
		return m.lostErr(c)
	case <-ctx.Done():
		return fmt.Errorf("uplink: mqtt %s: waiting for PUBACK: %w", m.name, ctx.Err())
	}
}
