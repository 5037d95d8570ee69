package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/buffer"
	"fieldlink/config"
	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/uplink"
)

// openBuffer opens the site's buffer with its configured policies.
func openBuffer(c *config.Config, enc packet.Encoding, log *slog.Logger) (*buffer.Buffer, error) {
	opt := buffer.Options{
		SyncEvery: c.Buffer.SyncEvery,
		MaxBytes:  int64(c.Buffer.MaxBytes),
		MaxAge:    c.Buffer.MaxAge,
		Encoding:  enc,
		Logger:    log.With("component", "buffer"),
	}
	if c.Buffer.Durability == "interval" {
		opt.Durability = buffer.Interval
	}
	if c.Buffer.WhenFull == "reject_new" {
		opt.WhenFull = buffer.RejectNew
	}
	if c.Buffer.Order == "newest_first" {
		opt.Order = buffer.NewestFirst
	}
	b, err := buffer.Open(c.Buffer.Path, opt)
	if err != nil {
		return nil, fmt.Errorf("buffer %s: %w", c.Buffer.Path, err)
	}
	return b, nil
}

// north is the delivery side of a running gateway: upstream connections,
// probes, load reports and the delivery loop.
type north struct {
	table    *selector.Table
	strat    selector.Strategy
	delivery *uplink.Delivery
	log      *slog.Logger

	upCtx    context.Context // lives until stop: upstreams outlive the delivery loop
	upCancel context.CancelFunc
	mu       sync.Mutex
	upstream []*upstream    // by table index
	dwg      sync.WaitGroup // the delivery loop
	wg       sync.WaitGroup // everything else
	registry *uplink.Registry
}

// upstream is one configured or registry-given upstream and what runs for it.
type upstream struct {
	name   string
	mqtt   *uplink.MQTT
	http   *uplink.HTTP
	sender uplink.Sender
	cancel context.CancelFunc
}

// password reads an upstream's password from its file or environment
// variable.
func password(c *config.Config, u config.Upstream) (string, error) {
	switch {
	case u.PasswordFile != "":
		b, err := os.ReadFile(c.Rel(u.PasswordFile))
		if err != nil {
			return "", err
		}
		line, _, _ := strings.Cut(string(b), "\n")
		return strings.TrimRight(line, "\r"), nil
	case u.PasswordEnv != "":
		return os.Getenv(u.PasswordEnv), nil
	}
	return "", nil
}

// startNorth builds the uplink and starts its goroutines under ctx.
func startNorth(ctx context.Context, c *config.Config, q *buffer.Buffer, log *slog.Logger) (*north, error) {
	u := c.Uplink
	strat, err := selector.New(u.Selector, selector.StrategyOptions{})
	if err != nil {
		return nil, err
	}
	if d := u.DRF; d != nil && u.Selector == "drf" {
		opt := selector.DRFOptions{Period: d.Period,
			TR: selector.DRFFactors(d.TR), N: selector.DRFFactors(d.N)}
		if d.ResponseTime == "window" {
			opt.ResponseTime = selector.DRFWindowed
		}
		if err := opt.Validate(); err != nil {
			return nil, fmt.Errorf("uplink.drf: %w", err)
		}
		strat = selector.NewDRF(opt)
	}
	n := &north{table: selector.NewTable(selector.Options{}), strat: strat, log: log}
	n.upCtx, n.upCancel = context.WithCancel(context.WithoutCancel(ctx))
	n.delivery = uplink.NewDelivery(q, n.table, strat, uplink.DeliveryOptions{Logger: log.With("component", "delivery"), DeadLetters: q})
	for i, cu := range u.Upstreams {
		if _, err := n.addUpstream(c, cu, q.Epoch()); err != nil {
			n.stop()
			return nil, fmt.Errorf("uplink.upstreams[%d] %s: %w", i, cu.URL, err)
		}
	}
	if u.Registry != nil {
		if err := n.startRegistry(c, q.Epoch()); err != nil {
			n.stop()
			return nil, err
		}
	}
	if irlb, ok := strat.(*selector.IRLB); ok {
		n.wg.Go(func() { n.trainIRLB(n.upCtx, c, q, irlb, 5*time.Minute) })
	}
	n.dwg.Go(func() { n.delivery.Run(ctx) })
	return n, nil
}

// addUpstream connects one upstream (its publisher, probe and load source)
// and returns its index in the selector's table.
func (n *north) addUpstream(c *config.Config, cu config.Upstream, epoch string) (int, error) {
	idx, err := n.add(c, cu, epoch)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", cu.URL, err)
	}
	return idx, nil
}

func (n *north) upstreamName(i int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i < len(n.upstream) && n.upstream[i] != nil {
		return n.upstream[i].name
	}
	return fmt.Sprint(i)
}

// retire stops picking upstream i and closes it after grace.
func (n *north) retire(i int, grace time.Duration) {
	n.table.Retire(i)
	n.mu.Lock()
	u := n.upstream[i]
	n.mu.Unlock()
	n.log.Info("upstream retired", "upstream", u.name)
	time.AfterFunc(grace, u.cancel)
}

func (n *north) add(c *config.Config, cu config.Upstream, epoch string) (int, error) {
	u := c.Uplink
	pw, err := password(c, cu)
	if err != nil {
		return 0, err
	}
	up := &upstream{}
	ctx, cancel := context.WithCancel(n.upCtx)
	up.cancel = cancel
	scheme, _ := config.UpstreamScheme(cu.URL)
	tlsConf, err := tlsFor(c, scheme, cu.TLS)
	if err != nil {
		up.cancel()
		return 0, err
	}
	// Load reports may arrive before the upstream has its table index.
	var index atomic.Int64
	index.Store(-1)
	// Everything that can fail is done before the upstream joins the
	// table, so a failed add leaves nothing half-registered.
	target := cu.Health
	if target == "" {
		if target, err = uplink.ProbeTarget(cu.URL); err != nil {
			up.cancel()
			return 0, err
		}
	}
	var lp *uplink.LoadPoller
	if cu.Load != nil && cu.Load.URL != "" {
		lp, err = uplink.NewLoadPoller(cu.Load.URL, cu.Load.Interval, u.Probe.Timeout, tlsConf, func(l selector.Load, err error) {
			i := int(index.Load())
			if i < 0 {
				return
			}
			if err != nil {
				n.log.Warn("load report failed", "upstream", n.upstreamName(i), "err", err)
				return
			}
			n.table.Report(i, l)
		})
		if err != nil {
			up.cancel()
			return 0, err
		}
	}
	switch scheme {
	case "mqtt", "mqtts":
		mc := uplink.MQTTConfig{
			URL: cu.URL, Topic: cu.Topic, Window: u.Window, Username: cu.Username, Password: pw, TLS: tlsConf,
			Logger: n.log,
			Vars:   map[string]string{"site": c.Site.ID, "gateway": c.Gateway.ID},
		}
		if *cu.QoS == 0 {
			mc.AtMostOnce = true
		}
		if cu.Load != nil && cu.Load.Topic != "" {
			mc.LoadTopic = cu.Load.Topic
			mc.OnLoad = func(payload []byte) { n.report(int(index.Load()), payload) }
		}
		m, err := uplink.NewMQTT(mc)
		if err != nil {
			up.cancel()
			return 0, err
		}
		up.mqtt, up.name = m, m.Name()
		up.sender = &uplink.MQTTSender{M: m, Win: u.Window}
		n.wg.Go(func() { m.Run(ctx) })
	case "http", "https":
		h, err := uplink.NewHTTP(uplink.HTTPConfig{URL: cu.URL, TLS: tlsConf, Username: cu.Username, Password: pw,
			Logger: n.log, GatewayID: c.Gateway.ID, Epoch: epoch})
		if err != nil {
			up.cancel()
			return 0, err
		}
		up.http, up.name = h, h.Name()
		up.sender = &uplink.HTTPSender{H: h, Batch: u.Batch, Win: max(1, u.Window/8)}
	}
	n.mu.Lock()
	idx := n.table.Add(up.name, cu.Weight)
	index.Store(int64(idx))
	for len(n.upstream) <= idx {
		n.upstream = append(n.upstream, nil)
	}
	n.upstream[idx] = up
	n.mu.Unlock()
	n.delivery.Add(idx, up.sender)

	hs, _ := up.sender.(*uplink.HTTPSender)
	pr := uplink.NewProber(target, u.Probe.Interval, u.Probe.Timeout, tlsConf, func(rtt time.Duration, err error) {
		n.table.Probe(idx, rtt, err)
		if hs != nil {
			hs.ProbeResult(err)
		}
		if up.mqtt != nil && err == nil && !up.mqtt.Connected() {
			up.mqtt.Kick() // the broker answers again: reconnect now
		}
	})
	n.wg.Go(func() { pr.Run(ctx) })
	if lp != nil {
		n.wg.Go(func() { lp.Run(ctx) })
	}
	return idx, nil
}

func (n *north) report(idx int, payload []byte) {
	if idx < 0 || len(payload) == 0 {
		return
	}
	l, err := uplink.ParseLoad(payload, time.Now())
	if err != nil {
		n.log.Warn("bad load report", "upstream", idx, "err", err)
		return
	}
	n.table.Report(idx, l)
}

func tlsFor(c *config.Config, scheme string, t *config.TLS) (*tls.Config, error) {
	if scheme != "mqtts" && scheme != "https" {
		return nil, nil
	}
	if t == nil {
		return uplink.TLSConfig("", "", "", false)
	}
	return uplink.TLSConfig(c.Rel(t.CA), c.Rel(t.Cert), c.Rel(t.Key), t.InsecureSkipVerify)
}

// stop waits for the delivery loop (it ends with the context startNorth
// was given, after the sends in flight are acked or back in the buffer),
// then disconnects every upstream and waits for its goroutines.
func (n *north) stop() {
	n.dwg.Wait()
	n.upCancel()
	n.mu.Lock()
	for _, u := range n.upstream {
		if u != nil {
			u.cancel()
		}
	}
	n.mu.Unlock()
	n.wg.Wait()
	for _, u := range n.upstream {
		if u != nil && u.http != nil {
			_ = u.http.Close()
		}
	}
}
