package agent

import (
	"context"
	"encoding/json"
	"time"

	"fieldlink/config"
	"fieldlink/fleet"
	"fieldlink/sensors"
	"fieldlink/uplink"
)

// reportTimeout bounds publishing one configuration state report;
// reportRetry is how often one no upstream took is tried again.
const (
	reportTimeout = 5 * time.Second
	reportRetry   = time.Second
)

// Vitals are what a bundle's probation watches: whether an upstream is
// connected, and the share of devices whose last poll succeeded.
func (g *Agent) Vitals() fleet.Vitals {
	var h fleet.Vitals
	for _, u := range g.Upstreams() {
		if u.Up {
			h.UpstreamUp = true
		}
	}
	devs := g.Sensors().Status()
	ok := 0
	for _, d := range devs {
		if d.Health == sensors.OK {
			ok++
		}
	}
	if len(devs) > 0 {
		h.Answering = float64(ok) / float64(len(devs))
	}
	return h
}

// Report keeps the remote configuration's state for the metrics and the
// status page, and publishes it, retained, on every connected MQTT
// upstream: at once, or, when none is connected (a bundle just reverted
// is reconnecting), as soon as one is.
func (g *Agent) Report(r fleet.Report) {
	g.fleetReport.Store(&r)
	g.reporterOnce.Do(func() { go g.reporter() })
	select {
	case g.reportKick <- struct{}{}:
	default:
	}
}

// reporter publishes the last report until an upstream takes it, until
// the gateway stops.
func (g *Agent) reporter() {
	t := time.NewTicker(reportRetry)
	defer t.Stop()
	var sent *fleet.Report
	for {
		select {
		case <-g.pollBase.Done():
			return
		case <-g.reportKick:
		case <-t.C:
		}
		r := g.fleetReport.Load()
		if r == nil || r == sent {
			continue
		}
		if g.publishReport(*r) {
			sent = r
		}
	}
}

// publishReport reports whether an upstream took r.
func (g *Agent) publishReport(r fleet.Report) bool {
	c := g.Config()
	up := g.cur.Load().up
	if up == nil || c.RemoteConfig == nil {
		return false
	}
	topic, err := uplink.ExpandTopic(c.RemoteConfig.StateTopic, topicVars(c))
	if err != nil {
		g.log.Error("configuration state not published: remote_config.state_topic", "err", err)
		return true // retrying cannot help
	}
	payload, _ := json.Marshal(r)
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	n, _ := up.pool.PublishAll(ctx, topic, payload, true)
	return n > 0
}

// remoteState is the last configuration state reported, for the metrics
// and the status page; nil before any.
func (g *Agent) remoteState() *fleet.Report {
	r := g.fleetReport.Load()
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// StartRemote runs the remote configuration's manager beside the gateway,
// which runs what fleet.Startup gave for local (the site file as on disk),
// until Stop.
func (g *Agent) StartRemote(local *config.Config, st fleet.State, profiles config.ProfileSource) error {
	m, err := fleet.NewManager(local, st, g, fleet.Options{Profiles: profiles, Log: g.log.With("component", "remote_config")})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g.stopRemote = func() { cancel(); <-done }
	g.remote.Store(m)
	go func() { defer close(done); m.Run(ctx) }()
	return nil
}

// ReloadLocal applies a reread site file, as SIGHUP does: with remote
// configuration running, the manager reloads the local file merged with
// the bundle in force (which stays in force) and takes its remote_config,
// keys included, only if that reload succeeds; a key file it cannot read
// refuses the whole file.
func (g *Agent) ReloadLocal(local *config.Config, profiles config.ProfileSource) error {
	if m := g.remote.Load(); m != nil && local.RemoteConfig != nil {
		return m.SetLocal(local)
	}
	return g.Reload(local)
}
