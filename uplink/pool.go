package uplink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/selector"
)

// UpstreamConfig is one upstream as a [Pool] connects it: what the site
// file (or a registry) says, with secrets read and TLS loaded.
type UpstreamConfig struct {
	// URL is mqtt://, mqtts://, http:// or https://; it may hold
	// credentials and is never logged as it is.
	URL string
	// Weight is the upstream's share for weighted strategies, 1..1000;
	// 0 means 1.
	Weight int
	// Drain keeps the upstream connected but never picked (a registry's
	// weight 0).
	Drain bool
	// Topic is the MQTT topic template ({site}, {gateway}, {data_type},
	// {device}); unused over HTTP.
	Topic string
	// AtMostOnce publishes at QoS 0 (no acknowledgement: a packet counts as
	// delivered once written to the connection).
	AtMostOnce         bool
	Username, Password string
	TLS                *tls.Config // nil over mqtt:// and http://
	// Encoding, Token and Header are an HTTP upstream's (see [fieldlink/uplink/http.Config]).
	Encoding Encoding
	Token    string
	Header   http.Header
	// ProbeURL is the probe's target (health in the site file); "" derives
	// it from URL ([ProbeTarget]).
	ProbeURL string
	// LoadURL polls an HTTP load report every LoadInterval; LoadTopic
	// subscribes to one on the upstream's own MQTT broker.
	LoadURL      string
	LoadInterval time.Duration
	LoadTopic    string
	// Options are the kind's own settings beyond these, of a type the
	// kind names (a Sparkplug B node's, for [EncodingSparkplugB]).
	Options any
	// Timeout bounds one HTTP post, or one MQTT publish's wait for its
	// PUBACK; 0 is the kind's default.
	Timeout time.Duration
	// OnLoad takes each load report from LoadTopic; the pool sets it.
	OnLoad func(payload []byte)
}

// Subscription is a topic an upstream subscribes to and what handles its
// messages.
type Subscription struct {
	// Topic template: {site} and {gateway} are filled in from Vars.
	Topic  string
	Handle func(payload []byte)
	// MaxSize is the largest payload handled (0: the kind's default);
	// a larger one is dropped and counted, and the connection drops a
	// payload larger than every subscription's as it arrives, never
	// holding it.
	MaxSize int
	// Admit, if set, tells a message that may jump the queue (a command
	// with a valid signature): those wait in a queue of their own, which
	// Handle empties first, so that a flood of others cannot push them
	// out. It runs on paho's router goroutine, before the message is
	// queued: it must be quick and must not block. Messages it refuses
	// are counted and still handled, if their queue has room.
	Admit func(payload []byte) bool
}

// PoolConfig configures a [Pool]. Table and Delivery are required.
type PoolConfig struct {
	Table    *selector.Table
	Delivery *Delivery
	// Window is the most MQTT publishes in flight per upstream; an HTTP
	// upstream gets an eighth of it in batches of Batch records.
	Window, Batch int
	// ProbeInterval and ProbeTimeout pace the latency probes and HTTP load
	// polls.
	ProbeInterval, ProbeTimeout time.Duration
	// Vars are the topic variables the site fixes ({site}, {gateway}).
	Vars map[string]string
	// StatusTopic is every MQTT upstream's status topic.
	StatusTopic string
	// ProbeTopic is where the latency probes of MQTT upstreams publish
	// (QoS 1, not retained, an empty payload: the kind's [Conn].NewProber), a topic
	// template whose only variables are {site} and {gateway} (from Vars);
	// "" means [DefaultProbeTopic], "off" TCP connects. Kept to
	// TCP connects whatever it says: Sparkplug B upstreams (their topic
	// namespace has no room for a probe topic) and upstreams with a
	// ProbeURL of their own.
	ProbeTopic string
	// GatewayID and Epoch go with every HTTP batch (see [fieldlink/uplink/http.Config]).
	GatewayID, Epoch string
	// Subscriptions are made on every MQTT upstream, the site's and the
	// registry's: the downlink's commands, requests for a configuration
	// pull.
	Subscriptions []Subscription
	Logger        *slog.Logger // nil discards
}

// Pool owns the connections to the upstreams and what runs for each: the
// publisher, its latency probe and its load source. It registers each in the
// selector's table and the delivery loop, retires those a registry drops,
// and closes every one at Stop.
//
// Identity: an upstream is known by its name, its URL without credentials
// or query ([UpstreamName]), which is also its key in the table. Two URLs
// that differ only in credentials are one upstream.
//
// A Pool is safe for concurrent use.
type Pool struct {
	cfg    PoolConfig
	log    *slog.Logger
	ctx    context.Context // the upstreams' goroutines run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	live    map[string]*member // by name
	retired []*member          // closing after their grace
	stopped bool
}

// member is one connected upstream and what runs for it.
type member struct {
	name   string
	index  int // in the table
	weight int
	drain  bool
	owner  string // who added it: "site" or "registry"
	conn   *Conn
	cancel context.CancelFunc
	timer  *time.Timer // retiring: closes it when its grace is over
	// gone is set at retire: its probes and load reports stop feeding the
	// table, whose index may go to another upstream.
	gone atomic.Bool

	mu     sync.Mutex
	closed bool // closeMember ran
}

// NewPool returns an empty pool whose upstreams run until Stop.
func NewPool(cfg PoolConfig) *Pool {
	p := &Pool{cfg: cfg, log: cfg.Logger, live: map[string]*member{}}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// errPoolStopped is returned by Add after Stop.
var errPoolStopped = errors.New("uplink: pool stopped")

// Add connects an upstream the site file lists and returns its table index.
// Everything that can fail is done before it joins the table, so a failed
// Add leaves nothing behind. Adding a name the pool already has updates its
// weight only.
func (p *Pool) Add(u UpstreamConfig) (int, error) { return p.add(u, "site") }

func (p *Pool) add(u UpstreamConfig, owner string) (int, error) {
	name, err := UpstreamName(u.URL)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return 0, errPoolStopped
	}
	if m, ok := p.live[name]; ok {
		p.mu.Unlock()
		return m.index, p.setWeight(m, u.Weight, u.Drain)
	}
	p.mu.Unlock()

	m, run, err := p.connect(name, u)
	if err != nil {
		return 0, err // the constructors name the upstream
	}
	m.owner, m.weight, m.drain = owner, max(u.Weight, 1), u.Drain
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		m.cancel()
		return 0, errPoolStopped
	}
	idx, err := p.cfg.Table.Add(name, m.weight)
	if err != nil {
		p.closeMember(m)
		return 0, err // names the upstream
	}
	m.index = idx
	if m.drain {
		p.cfg.Table.Retire(idx) // connected, not picked
	}
	p.live[name] = m
	run(idx)
	return idx, nil
}

// setWeight applies a weight change to a live upstream, and drains it or
// brings it back.
func (p *Pool) setWeight(m *member, w int, drain bool) error {
	w = max(w, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if w == m.weight && drain == m.drain {
		return nil
	}
	m.weight, m.drain = w, drain
	if drain {
		p.cfg.Table.Retire(m.index)
		p.log.Info("upstream drained: kept connected, not picked", "upstream", m.name)
		return nil
	}
	idx, err := p.cfg.Table.Add(m.name, w)
	if err != nil {
		return err
	}
	if idx != m.index {
		// Cannot happen: Add returns a known name's own index.
		return fmt.Errorf("uplink: %s moved from index %d to %d", m.name, m.index, idx)
	}
	p.log.Info("upstream weight changed", "upstream", m.name, "weight", w)
	return nil
}

// connect builds the publisher, probe and load source of one upstream. run
// starts them once the upstream has its table index.
func (p *Pool) connect(name string, u UpstreamConfig) (*member, func(idx int), error) {
	cfg := p.cfg
	target := u.ProbeURL
	if target == "" {
		var err error
		if target, err = ProbeTarget(u.URL); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	m := &member{name: name}
	ctx, cancel := context.WithCancel(p.ctx)
	m.cancel = cancel
	var index = -1 // set by run, before any report can be applied
	var indexMu sync.Mutex
	at := func() int {
		indexMu.Lock()
		defer indexMu.Unlock()
		if m.gone.Load() {
			return -1
		}
		return index
	}
	var lp *loadPoller
	if u.LoadURL != "" {
		var err error
		lp, err = newLoadPoller(u.LoadURL, u.LoadInterval, cfg.ProbeTimeout, u.TLS, func(l selector.Load, err error) {
			i := at()
			if i < 0 {
				return
			}
			if err != nil {
				p.log.Warn("load report failed", "upstream", name, "err", err)
				return
			}
			cfg.Table.Report(i, l)
		})
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if u.LoadTopic != "" {
		u.OnLoad = func(payload []byte) { p.report(name, at(), payload) }
	}
	kind, err := kindOfURL(u.URL, u.Encoding)
	if err == nil {
		pc := cfg
		pc.Logger = p.log
		m.conn, err = kind.Open(u, pc)
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	c := m.conn
	probeTopic := ""
	if c.NewProber != nil && u.ProbeURL == "" {
		if probeTopic, err = poolProbeTopic(cfg.ProbeTopic, cfg.Vars); err != nil {
			cancel()
			if c.Close != nil {
				_ = c.Close()
			}
			return nil, nil, fmt.Errorf("%s: probe topic: %w", name, err)
		}
	}
	run := func(idx int) {
		indexMu.Lock()
		index = idx
		indexMu.Unlock()
		cfg.Delivery.Add(idx, c.Sender)
		if c.Run != nil {
			p.wg.Go(func() { c.Run(ctx) })
		}
		report := func(rtt time.Duration, err error) {
			if m.gone.Load() {
				return
			}
			cfg.Table.Probe(idx, rtt, err)
			if c.ProbeResult != nil {
				c.ProbeResult(err)
			}
		}
		var pr *Prober
		if probeTopic != "" {
			pr = c.NewProber(probeTopic, cfg.ProbeInterval, cfg.ProbeTimeout, report)
		} else {
			pr = NewProber(target, cfg.ProbeInterval, cfg.ProbeTimeout, u.TLS, report)
		}
		p.wg.Go(func() { pr.Run(ctx) })
		if lp != nil {
			p.wg.Go(func() { lp.Run(ctx) })
		}
	}
	return m, run, nil
}

// poolProbeTopic is the probe topic of an MQTT upstream from
// [PoolConfig.ProbeTopic]: "" for TCP connects.
func poolProbeTopic(tmpl string, vars map[string]string) (string, error) {
	switch tmpl {
	case topicOff:
		return "", nil
	case "":
		tmpl = DefaultProbeTopic
	}
	return ExpandTopic(tmpl, vars)
}

// report applies a load report received over MQTT.
func (p *Pool) report(name string, idx int, payload []byte) {
	if idx < 0 || len(payload) == 0 {
		return
	}
	l, err := parseLoad(payload, time.Now())
	if err != nil {
		p.log.Warn("bad load report", "upstream", name, "err", err)
		return
	}
	p.cfg.Table.Report(idx, l)
}

// retire stops picking the named upstream at once and closes its
// connection after grace, so that deliveries in flight can finish. It
// reports whether the pool had it.
func (p *Pool) retire(name string, grace time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.live[name]
	if !ok {
		return false
	}
	delete(p.live, name)
	m.gone.Store(true)
	p.cfg.Table.Retire(m.index)
	p.log.Info("upstream retired", "upstream", name)
	p.retired = append(p.retired, m)
	m.timer = time.AfterFunc(grace, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stopped {
			return // Stop closes it
		}
		p.closeMember(m)
		for i, r := range p.retired {
			if r == m {
				p.retired = append(p.retired[:i], p.retired[i+1:]...)
				break
			}
		}
	})
	return true
}

// closeMember ends an upstream's goroutines and closes its connections.
func (p *Pool) closeMember(m *member) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	if m.conn.Close != nil {
		_ = m.conn.Close()
	}
}

// names returns the live upstreams' names and who added each ("site" or
// "registry").
func (p *Pool) names() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.live))
	for n, m := range p.live {
		out[n] = m.owner
	}
	return out
}

// PublishAll publishes payload on topic through every connected MQTT
// upstream and returns how many took it: a command's result goes out on
// every broker it may have come through, a state report to every one the
// platform may watch.
func (p *Pool) PublishAll(ctx context.Context, topic string, payload []byte, retained bool) (int, error) {
	p.mu.Lock()
	var cs []*Conn
	for _, m := range p.live {
		if m.conn.Publish != nil && m.conn.Connected() {
			cs = append(cs, m.conn)
		}
	}
	p.mu.Unlock()
	n := 0
	var errs []error
	for _, c := range cs {
		if err := c.Publish(ctx, topic, payload, retained); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Stop disconnects every upstream, retiring ones included, and waits for
// their goroutines. Call it after the delivery loop has ended.
func (p *Pool) Stop() {
	p.mu.Lock()
	p.stopped = true
	for _, m := range p.retired {
		m.timer.Stop()
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.live {
		p.closeMember(m)
	}
	for _, m := range p.retired {
		p.closeMember(m)
	}
	p.retired = nil
}
