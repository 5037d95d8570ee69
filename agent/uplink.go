package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"fieldlink/buffer/cardstore"
	"fieldlink/config"
	"fieldlink/selector"
	"fieldlink/uplink"
	uplinkhttp "fieldlink/uplink/http"
	_ "fieldlink/uplink/kinds" // every kind of upstream the site file may name
	uplinkmqtt "fieldlink/uplink/mqtt"
	uplinksparkplug "fieldlink/uplink/sparkplug"
)

// uplinkSide is the delivery side of a running gateway: the selector and
// its table, the upstream pool, the registry and the delivery loop.
type uplinkSide struct {
	cfg      *config.Config
	table    *selector.Table
	strat    selector.Strategy
	delivery *uplink.Delivery
	pool     *uplink.Pool
	log      *slog.Logger

	cancel context.CancelFunc // ends the delivery loop, the registry and irlb's training
	dwg    sync.WaitGroup     // the delivery loop
	wg     sync.WaitGroup     // the registry and irlb's training
}

// Strategy builds the selection strategy an uplink config names.
func Strategy(u *config.Uplink) (selector.Strategy, error) {
	if d := u.DRF; d != nil && u.Selector == "drf" {
		opt := selector.DRFOptions{Period: d.Period,
			TR: selector.DRFFactors(d.TR), N: selector.DRFFactors(d.N)}
		if d.ResponseTime == "window" {
			opt.ResponseTime = selector.DRFWindowed
		}
		if err := opt.Validate(); err != nil {
			return nil, fmt.Errorf("uplink.drf: %w", err)
		}
		return selector.New("drf", selector.StrategyOptions{DRF: &opt})
	}
	return selector.New(u.Selector, selector.StrategyOptions{})
}

// startUplink connects c's upstreams and starts delivering from q.
// subs are subscribed on every MQTT upstream (see Agent.subscriptions);
// sp serves Sparkplug B upstreams.
func startUplink(c *config.Config, q *cardstore.Store, subs []uplink.Subscription, sp sparkplugHooks, log *slog.Logger) (*uplinkSide, error) {
	u := c.Uplink
	strat, err := Strategy(u)
	if err != nil {
		return nil, err
	}
	s := &uplinkSide{cfg: c, table: selector.NewTable(selector.Options{}), strat: strat, log: log}
	s.delivery = uplink.NewDelivery(q, s.table, strat, uplink.DeliveryOptions{Logger: log.With("component", "delivery"), DeadLetters: q})
	s.pool = uplink.NewPool(uplink.PoolConfig{
		Subscriptions: subs,
		Table:         s.table, Delivery: s.delivery, Window: u.Window, Batch: u.Batch, StatusTopic: u.StatusTopic,
		ProbeInterval: u.Probe.Interval, ProbeTimeout: u.Probe.Timeout, ProbeTopic: u.ProbeTopic,
		Vars:      topicVars(c),
		GatewayID: c.Gateway.ID, Epoch: q.Epoch(), Logger: log,
	})
	ucs, err := upstreamConfigs(c, sp)
	for i := 0; err == nil && i < len(u.Upstreams); i++ {
		if ucs[i] == nil {
			continue // a server of a Sparkplug node listed before it
		}
		if _, aerr := s.pool.Add(*ucs[i]); aerr != nil {
			err = fmt.Errorf("uplink.upstreams[%d]: %w", i, aerr)
		}
	}
	if err != nil {
		s.pool.Stop()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if u.Registry != nil {
		if err := s.startRegistry(ctx); err != nil {
			cancel()
			s.pool.Stop()
			return nil, err
		}
	}
	if irlb, ok := strat.(selector.Trained); ok {
		s.wg.Go(func() { trainIRLB(ctx, c, q, irlb, irlbInterval, log) })
	}
	s.dwg.Go(func() { s.delivery.Run(ctx) })
	return s, nil
}

// topicVars are the MQTT topic variables a site fixes.
func topicVars(c *config.Config) map[string]string {
	return map[string]string{"site": c.Site.ID, "gateway": c.Gateway.ID}
}

// stop ends the delivery loop (sends in flight are acked or released to
// the buffer), then disconnects every upstream.
func (s *uplinkSide) stop() {
	s.cancel()
	s.dwg.Wait()
	s.wg.Wait()
	s.pool.Stop()
}

// upstreamConfigs are the upstreams of c as the pool takes them, by
// index in the site file. Sparkplug upstreams with one group_id and
// edge_node are one node: its servers, in the site file's order, which it
// walks one at a time (docs/sparkplug.md). The first is the pool's
// upstream, with the others as its Servers; theirs are nil.
func upstreamConfigs(c *config.Config, sp sparkplugHooks) ([]*uplink.UpstreamConfig, error) {
	ups := c.Uplink.Upstreams
	out := make([]*uplink.UpstreamConfig, len(ups))
	nodes := map[[2]string]*uplinksparkplug.Config{}
	for i, cu := range ups {
		uc, err := upstreamConfig(c, cu)
		if err != nil {
			return nil, fmt.Errorf("uplink.upstreams[%d]: %w", i, err)
		}
		if cu.Sparkplug != nil {
			key := [2]string{cu.Sparkplug.GroupID, cu.Sparkplug.EdgeNode}
			if n := nodes[key]; n != nil {
				n.Servers = append(n.Servers, uplinksparkplug.Server{URL: uc.URL, Username: uc.Username, Password: uc.Password, TLS: uc.TLS})
				continue
			}
			node := sparkplugNode(c, cu.Sparkplug, sp)
			uc.Options = node
			nodes[key] = node
		}
		out[i] = &uc
	}
	return out, nil
}

// upstreamConfig reads an upstream's password and TLS files.
func upstreamConfig(c *config.Config, cu config.Upstream) (uplink.UpstreamConfig, error) {
	name, err := uplink.UpstreamName(cu.URL)
	if err != nil {
		return uplink.UpstreamConfig{}, err
	}
	pw, err := password(c, cu)
	if err != nil {
		return uplink.UpstreamConfig{}, fmt.Errorf("%s: password: %w", name, err)
	}
	scheme, _ := config.UpstreamScheme(cu.URL)
	tlsConf, err := tlsFor(c, scheme, cu.TLS)
	if err != nil {
		return uplink.UpstreamConfig{}, fmt.Errorf("%s: tls: %w", name, err)
	}
	uc := uplink.UpstreamConfig{
		URL: cu.URL, Weight: cu.Weight, Topic: cu.Topic, AtMostOnce: cu.QoS != nil && *cu.QoS == 0,
		Username: cu.Username, Password: pw, TLS: tlsConf, ProbeURL: cu.ProbeURL, Encoding: cu.Encoding,
	}
	if cu.TokenFile != "" {
		if uc.Token, err = c.Secret(cu.TokenFile); err != nil {
			return uplink.UpstreamConfig{}, fmt.Errorf("%s: token: %w", name, err)
		}
	}
	if cu.HeadersFile != "" {
		b, err := os.ReadFile(c.Rel(cu.HeadersFile))
		if err == nil {
			uc.Header, err = uplinkhttp.ParseHeaderFile(b)
		}
		if err != nil {
			return uplink.UpstreamConfig{}, fmt.Errorf("%s: headers: %s: %w", name, c.Rel(cu.HeadersFile), err)
		}
	}
	if l := cu.Load; l != nil {
		uc.LoadURL, uc.LoadInterval, uc.LoadTopic = l.URL, l.Interval, l.Topic
	}
	return uc, nil
}

// password reads an upstream's password from its file or environment
// variable.
func password(c *config.Config, u config.Upstream) (string, error) {
	switch {
	case u.PasswordFile != "":
		return c.Secret(u.PasswordFile)
	case u.PasswordEnv != "":
		return os.Getenv(u.PasswordEnv), nil
	}
	return "", nil
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

// registryFile keeps the registry's last good answer beside the buffer, so
// that a gateway restarting without network still knows its upstreams.
func registryFile(c *config.Config) string { return c.Buffer.Path + ".registry.json" }

// startRegistry seeds the upstreams from the last good registry answer and
// keeps them in step with the registry until ctx ends (see
// [uplink.Pool.Reconcile]).
func (s *uplinkSide) startRegistry(ctx context.Context) error {
	c := s.cfg
	log := s.log.With("component", "registry")
	template := func(ru uplink.RegistryUpstream) uplink.UpstreamConfig {
		uc := uplink.UpstreamConfig{URL: ru.URL}
		if sch, _ := config.UpstreamScheme(ru.URL); sch == "mqtt" || sch == "mqtts" {
			uc.Topic = uplinkmqtt.DefaultTopic
		}
		if sch, _ := config.UpstreamScheme(ru.URL); sch == "mqtts" || sch == "https" {
			uc.TLS, _ = uplink.TLSConfig("", "", "", false)
		}
		return uc
	}
	var reg *uplink.Registry
	reg, err := uplink.NewRegistry(uplink.RegistryConfig{
		URL: c.Uplink.Registry.URL, Interval: c.Uplink.Registry.Refresh, Logger: log,
		OnChange: func(list []uplink.RegistryUpstream) {
			s.pool.Reconcile(list, template, uplink.RetireGrace)
			if err := uplink.SaveRegistryList(registryFile(c), reg.Raw()); err != nil {
				log.Warn("registry list not saved", "file", registryFile(c), "err", err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("uplink.registry: %w", err)
	}
	list, err := uplink.LoadRegistryList(registryFile(c))
	switch {
	case err != nil:
		log.Warn("saved registry list unreadable; waiting for the registry", "err", err)
	case list != nil:
		if err := reg.Seed(list); err != nil {
			log.Warn("saved registry list refused; waiting for the registry", "err", err)
		} else {
			log.Info("upstreams from the saved registry list", "count", len(list))
			s.pool.Reconcile(list, template, uplink.RetireGrace)
		}
	}
	s.wg.Go(func() { reg.Run(ctx) })
	return nil
}
