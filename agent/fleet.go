package agent

import (
	"context"
	"encoding/json"
	"time"

	"fieldlink/fleet"
	"fieldlink/sensors"
	"fieldlink/uplink"
)

// reportTimeout bounds publishing one configuration state report.
const reportTimeout = 5 * time.Second

// Health is what a bundle's probation watches: whether an upstream is
// connected, and the share of devices whose last poll succeeded.
func (g *Agent) Health() fleet.Health {
	var h fleet.Health
	for _, u := range g.Upstreams() {
		if u.Up {
			h.UpstreamUp = true
		}
	}
	devs := g.Site().Status()
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

// Report publishes the remote configuration's state, retained, on every
// connected MQTT upstream, and keeps it for the metrics and status page.
func (g *Agent) Report(r fleet.Report) {
	g.fleetReport.Store(&r)
	c := g.Config()
	up := g.cur.Load().up
	if up == nil || c.RemoteConfig == nil {
		return
	}
	topic, err := uplink.ExpandTopic(c.RemoteConfig.StateTopic, topicVars(c))
	if err != nil {
		g.log.Error("configuration state not published: remote_config.state_topic", "err", err)
		return
	}
	payload, _ := json.Marshal(r)
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	if n, err := up.pool.PublishAll(ctx, topic, payload, true); n == 0 {
		g.log.Warn("configuration state not published: no MQTT upstream took it", "state", r.State, "serial", r.Serial, "err", err)
	}
}

// FleetReport is the last configuration state reported; nil before any.
func (g *Agent) FleetReport() *fleet.Report { return g.fleetReport.Load() }
