package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"fieldlink/uplink"
	paho "github.com/eclipse/paho.mqtt.golang"
)

func (m *mqttUpstream) setLastErr(err error) {
	if err == nil {
		m.lastErr.Store(nil)
		return
	}
	m.lastErr.Store(&err)
}

// lastError is the latest reason a connection to the broker failed or
// ended, in words, and when; "" before the first. It stays
// after the connection is made again: the status page shows it beside
// the time. Safe for concurrent use.
func (m *mqttUpstream) lastError() (string, time.Time) { return m.noted.Get() }

// acceptedErr is a failure of [mqttUpstream.connect] after the broker accepted
// the connection (its CONNACK came): the link was up, if briefly. stalled
// is set when a publish or subscription had waited for its answer
// mqttStallAge or longer as the connection was lost.
type acceptedErr struct {
	error
	stalled bool
}

func (e acceptedErr) Unwrap() error { return e.error }

// refusedBeforeCONNACK reports whether a connect failed by the broker
// closing the connection before its CONNACK.
func refusedBeforeCONNACK(err error) bool {
	var pre connectErr
	return errors.As(err, &pre) && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET))
}

// connectErr is a failure of [mqttUpstream.connect] before the broker's CONNACK.
type connectErr struct{ error }

func (e connectErr) Unwrap() error { return e.error }

// droppedByBroker reports whether err ended a connection that the broker
// had accepted, lived for lived, by the broker closing it (as on a
// session takeover), rather than by a timeout or by this side. stalled
// says the broker had left a request unanswered for mqttStallAge or longer
// when it closed the connection (or refused a connect after that long):
// a broker that cannot store (a cluster electing a stream leader) closes
// its publishers' connections, each just after accepting it, as a
// takeover does; but a takeover does not wait for anything.
func droppedByBroker(err error, lived, within time.Duration, stalled bool) bool {
	if lived >= within || stalled {
		return false
	}
	var acc acceptedErr
	if errors.As(err, &acc) {
		return !acc.stalled && errors.Is(err, errMQTTConnLost) && !errors.Is(err, errMQTTAckTimeout)
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// Run keeps a connection to the broker until ctx ends: it connects, and
// after a failure or a lost connection waits a jittered exponential backoff
// (1 s doubling to 60 s; reset after a connection that stayed up that long)
// and connects again, each time with a fresh paho client (clean session,
// no automatic reconnect: see [mqttUpstream]). When the broker closes
// mqttTakeoverDrops connections in a row that it had accepted, each before
// it was up for the longest backoff, the loss is reported as
// [ErrClientIDInUse]: a broker that drops a client as another connects
// with its client id does just that, and the other client does the same
// in turn. A close that came while a publish had waited mqttStallAge for
// its PUBACK, or a connect refused only after that long, is a stalled
// broker's (a cluster electing a stream leader closes its publishers'
// connections so, one reconnect after another), not a takeover's, and
// starts the count over. When ctx ends it publishes a
// retained "offline", disconnects cleanly and returns once its goroutines
// have stopped: at once on a healthy link, after at most about
// 2×PublishTimeout on a stuck one. Call Run once.
func (m *mqttUpstream) Run(ctx context.Context) {
	if !m.running.CompareAndSwap(false, true) {
		m.log.Error("uplink: mqtt: Run called twice; the second call returns at once", "upstream", m.name)
		return
	}
	defer m.running.Store(false) // a kind on the connection may run it again (see [Upstream.Run])
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.cfg.OnLoad != nil {
		wg.Go(func() { m.dispatchLoads(ctx) })
	}
	for _, sub := range m.subs {
		wg.Go(func() { m.dispatch(ctx, sub) })
	}
	attempt, drops := 0, 0
	for {
		c, err := m.connect(ctx)
		stalled := false
		if err == nil {
			wg.Go(func() { m.pump(c) })
		}
		if ctx.Err() != nil {
			if c != nil {
				m.setLastErr(errors.New("stopped"))
				m.shutdown(c)
			}
			return
		}
		if err == nil {
			m.setLastErr(nil)
			m.cur.Store(c)
			m.log.Info("mqtt connected", "upstream", m.name, "client_id", m.cfg.ClientID)
			select {
			case <-ctx.Done():
				m.setLastErr(errors.New("stopped"))
				m.cur.Store(nil)
				m.shutdown(c)
				return
			case <-c.lost:
			}
			err = c.lostErr
			m.setLastErr(err)
			m.cur.Store(nil)
			c.closeSocket()
			<-c.pumpDone // it returns at the loss, having noted the oldest wait
			c.noteAbandoned()
			stalled = time.Duration(c.waited.Load()) >= m.stallAge
			if time.Since(c.since) >= m.backoffMax {
				attempt = 0
			}
		}
		lived := time.Duration(0)
		if c != nil {
			lived = time.Since(c.since)
		}
		switch {
		case refusedBeforeCONNACK(err):
			// Neither a takeover's drop nor a sign against one: a broker
			// refuses a connect so while its sessions are out of reach (a
			// cluster electing the session stream's leader) and, for a
			// moment, right after a takeover.
		case droppedByBroker(err, lived, m.backoffMax, stalled):
			drops++
		default:
			drops = 0
		}
		if drops >= mqttTakeoverDrops {
			err = fmt.Errorf("%w (%s): the broker drops each connection as the other connects (two gateways with the same gateway.id?); last: %v",
				ErrClientIDInUse, m.cfg.ClientID, err)
			if drops == mqttTakeoverDrops {
				m.log.Error("mqtt: another client uses this gateway's MQTT client id: the broker drops each connection as the other connects; give each gateway its own gateway.id",
					"upstream", m.name, "client_id", m.cfg.ClientID, "drops_in_a_row", drops)
			}
		}
		m.setLastErr(err)
		m.noted.Note(uplink.Explain(err))
		if m.hook != nil {
			m.hook.Down()
		}
		d := m.backoff(attempt)
		attempt++
		m.log.Warn("mqtt upstream down", "upstream", m.name, "err", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-m.kick:
			t.Stop()
			attempt = 0
		}
	}
}

// backoff is the wait before connect attempt n+1: min·2^n capped at max,
// then jittered to between half and all of that.
func (m *mqttUpstream) backoff(n int) time.Duration {
	d := m.backoffMax
	if n < 30 {
		d = min(m.backoffMin<<n, m.backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// mqttConn is one connection: one paho client, used once.
type mqttConn struct {
	cl    paho.Client
	since time.Time

	mu     sync.Mutex
	nc     net.Conn // the socket, once dialed
	closed bool     // closeSocket was called

	slots    chan struct{}     // the in-flight window: one per request not yet answered
	requests chan *mqttRequest // to the pump
	closing  chan struct{}     // closed to have the pump finish
	pumpDone chan struct{}     // closed when the pump has returned

	lostOnce sync.Once
	lostErr  error         // why, written before lost is closed
	lost     chan struct{} // closed when the connection is gone

	// waited is how long the oldest publish without its PUBACK had waited
	// when the connection was lost (ns; 0 if none), set by the pump
	// before pumpDone closes, or by await.
	waited atomic.Int64
	// abandoned are publishes whose caller stopped waiting for their
	// PUBACK (guarded by mu).
	abandoned []mqttInflight
	// link is the connection as the upstream's hook sees it, once
	// connected; nil without a hook.
	link *Link
}

func (c *mqttConn) markLost(err error) {
	c.lostOnce.Do(func() {
		c.lostErr = err
		close(c.lost)
	})
}

// closeSocket closes the socket now and any socket dialed later for c.
func (c *mqttConn) closeSocket() {
	c.mu.Lock()
	c.closed = true
	if c.nc != nil {
		_ = c.nc.Close()
	}
	c.mu.Unlock()
}

// drop ends a connection that cannot be trusted any more; paho then fails
// its pending tokens and Run makes a new one.
func (c *mqttConn) drop(err error) {
	c.markLost(err)
	c.closeSocket()
}

// connect makes a connection and announces it: subscribes to the load
// topic and publishes the retained "online". On error nothing is left
// running.
func (m *mqttUpstream) connect(ctx context.Context) (*mqttConn, error) {
	c := &mqttConn{
		lost:     make(chan struct{}),
		slots:    make(chan struct{}, m.cfg.Window),
		requests: make(chan *mqttRequest, m.cfg.Window),
		closing:  make(chan struct{}),
		pumpDone: make(chan struct{}),
	}
	o := paho.NewClientOptions()
	o.AddBroker("tcp://" + m.addr) // dialed by dial below, whatever the scheme
	o.SetClientID(m.cfg.ClientID)
	o.SetProtocolVersion(4) // 3.1.1, no silent fallback to 3.1
	o.SetCleanSession(true)
	o.SetAutoReconnect(false)
	o.SetConnectRetry(false)
	o.SetOrderMatters(true) // handlers here never block
	o.SetKeepAlive(m.cfg.KeepAlive)
	o.SetConnectTimeout(m.cfg.ConnectTimeout)
	o.SetWriteTimeout(m.cfg.PublishTimeout)
	if m.status != "" {
		o.SetWill(m.status, mqttStatusOffline, 1, true)
	}
	if m.hook != nil {
		if topic, payload := m.hook.Will(); topic != "" {
			o.SetBinaryWill(topic, payload, 1, false)
		}
	}
	if m.cfg.Username != "" {
		o.SetUsername(m.cfg.Username)
	}
	if m.cfg.Password != "" {
		o.SetPassword(m.cfg.Password)
	}
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		c.markLost(fmt.Errorf("connection lost: %w", err))
	})
	o.SetCustomOpenConnectionFn(func(*url.URL, paho.ClientOptions) (net.Conn, error) {
		return m.dial(ctx, c)
	})
	c.cl = paho.NewClient(o)

	stop := context.AfterFunc(ctx, c.closeSocket) // ends a dial or a CONNACK wait
	tok := c.cl.Connect()
	<-tok.Done() // bounded by ConnectTimeout
	stopped := stop()
	if err := tok.Error(); err != nil {
		c.closeSocket()
		return nil, connectErr{fmt.Errorf("connect: %w", err)}
	}
	c.since = time.Now()
	fail := func(err error) (*mqttConn, error) {
		c.cl.Disconnect(0)
		c.drop(err)
		c.noteAbandoned()
		return nil, acceptedErr{err, time.Duration(c.waited.Load()) >= m.stallAge}
	}
	if !stopped {
		return fail(ctx.Err())
	}
	if m.cfg.LoadTopic != "" {
		st := c.cl.Subscribe(m.cfg.LoadTopic, 1, m.onLoadMessage)
		if err := m.await(ctx, c, st, m.cfg.PublishTimeout); err != nil {
			return fail(fmt.Errorf("subscribe to load topic: %w", err))
		}
		if code := st.(*paho.SubscribeToken).Result()[m.cfg.LoadTopic]; code == 0x80 {
			m.log.Warn("mqtt broker refused the load topic subscription", "upstream", m.name, "topic", m.cfg.LoadTopic)
		}
	}
	for _, sub := range m.subs {
		st := c.cl.Subscribe(sub.topic, 1, func(_ paho.Client, msg paho.Message) { m.deliver(sub, msg) })
		if err := m.await(ctx, c, st, m.cfg.PublishTimeout); err != nil {
			return fail(fmt.Errorf("subscribe to %s: %w", sub.topic, err))
		}
		if code := st.(*paho.SubscribeToken).Result()[sub.topic]; code == 0x80 {
			m.log.Error("mqtt broker refused a subscription: nothing can arrive through it", "upstream", m.name, "topic", sub.topic)
		}
	}
	if m.status != "" {
		if err := m.await(ctx, c, c.cl.Publish(m.status, 1, true, mqttStatusOnline), m.cfg.PublishTimeout); err != nil {
			return fail(fmt.Errorf("publish %q on the status topic: %w", mqttStatusOnline, err))
		}
	}
	if m.hook != nil {
		c.link = &Link{m: m, c: c}
		c.link.timeout.Store(int64(m.cfg.PublishTimeout))
		if err := m.hook.Connected(ctx, c.link); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// dial opens the socket (and TLS) for connection c within ConnectTimeout.
func (m *mqttUpstream) dial(ctx context.Context, c *mqttConn) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ConnectTimeout)
	defer cancel()
	var (
		nc  net.Conn
		err error
	)
	var d net.Dialer
	nc, err = d.DialContext(ctx, "tcp", m.addr)
	if err != nil {
		return nil, err
	}
	nc = quickAck(nc)
	if m.useTLS {
		cfg := m.tlsConfig
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(m.addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = nc.Close()
		return nil, errors.New("connection closed while dialing")
	}
	c.nc = nc
	return newMQTTLimitConn(nc, m.inboundLimit(), func(topic string, size int) {
		m.oversize.note(m.log, "message over the size limit refused at the connection: its payload was dropped as it arrived",
			"upstream", m.name, "topic", topic, "bytes", size, "limit", m.inboundLimit())
	}), nil
}

// shutdown lets the pump finish (the PUBACKs in flight come in while the
// link is up), publishes the retained "offline" and disconnects.
func (m *mqttUpstream) shutdown(c *mqttConn) {
	close(c.closing)
	<-c.pumpDone
	var err error
	if m.status != "" {
		err = m.await(context.Background(), c, c.cl.Publish(m.status, 1, true, mqttStatusOffline),
			min(m.cfg.PublishTimeout, mqttOfflineTimeout))
	}
	if c.link != nil {
		c.link.timeout.Store(int64(min(m.cfg.PublishTimeout, mqttOfflineTimeout)))
		m.hook.Ending(c.link)
	}
	c.cl.Disconnect(mqttDisconnectQuiesce)
	c.drop(errors.New("stopped"))
	if err != nil {
		m.log.Warn("mqtt disconnected; the broker publishes the last will", "upstream", m.name, "err", err)
		return
	}
	m.log.Info("mqtt disconnected", "upstream", m.name)
}
