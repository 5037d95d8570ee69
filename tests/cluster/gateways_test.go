//go:build cluster

package cluster

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/agent"
	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

// gateways is a fleet of real agents in the test process, each on its own
// site file (the demo farm's devices on one emulated bus, its own buffer,
// one upstream per address, the selector strat), as TestFleet runs them;
// TestLimit puts proxies between them and the nodes, TestScale adds
// gateways step by step.
type gateways struct {
	t        *testing.T
	bus      string
	strat    string
	addrs    []string // the upstreams, one per node
	led      *ledger
	profiles config.ProfileSource

	mu      sync.Mutex
	gws     []*agent.Agent
	stopped bool
	stored  atomic.Int64 // packets the fleet stored
}

func newGateways(t *testing.T, bus, strat string, addrs []string, led *ledger) *gateways {
	g := &gateways{t: t, bus: bus, strat: strat, addrs: addrs, led: led,
		profiles: func(string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, "") }}
	t.Cleanup(g.stop)
	return g
}

// add starts n more gateways.
func (g *gateways) add(n int) {
	g.t.Helper()
	for range n {
		g.mu.Lock()
		i := len(g.gws)
		g.mu.Unlock()
		c := g.site(i)
		a, err := agent.Start(c, agent.Options{
			Logger: slog.New(slog.DiscardHandler),
			OnPacket: func(p *packet.Packet) {
				g.stored.Add(1)
				g.led.storedPacket(p, time.Now())
			},
		})
		if err != nil {
			g.t.Fatalf("gateway %d: %v", i, err)
		}
		g.mu.Lock()
		g.gws = append(g.gws, a)
		g.mu.Unlock()
	}
}

// all is the gateways started so far.
func (g *gateways) all() []*agent.Agent {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*agent.Agent(nil), g.gws...)
}

// delivered is the records the fleet's gateways had acknowledged, by
// upstream (the index in addrs).
func (g *gateways) delivered() []float64 {
	out := make([]float64, len(g.addrs))
	for _, a := range g.all() {
		st, _ := a.Delivery()
		for _, u := range st.Upstreams {
			for i, addr := range g.addrs {
				if u.Name == "mqtt://"+addr {
					out[i] += float64(u.Delivered)
				}
			}
		}
	}
	return out
}

// stopPolling has every gateway stop polling: what they stored is still
// delivered.
func (g *gateways) stopPolling() {
	for _, a := range g.all() {
		a.StopPolling()
	}
}

// drain ends a run: the gateways stop polling, the test fails on any
// packet stored that does not reach the subscriber within catchUpLimit,
// then they stop; it returns the ledger's totals, each problem reported.
func (g *gateways) drain(t *testing.T, led *ledger, start time.Time) totals {
	t.Helper()
	g.stopPolling()
	end := time.Now()
	if _, ok := waitCaughtUp(led, end, catchUpLimit); !ok {
		t.Errorf("%d packets stored did not reach the subscriber within %v of the end", led.missing(start.Add(-time.Hour), end), catchUpLimit)
	}
	g.stop()
	tot := led.totals()
	for _, p := range tot.problems {
		t.Errorf("ledger: %s", p)
	}
	return tot
}

// stop stops every gateway, all at once.
func (g *gateways) stop() {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.stopped = true
	gws := g.gws
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, a := range gws {
		wg.Go(func() { _ = a.Stop() })
	}
	wg.Wait()
}

// site parses gateway i's site file.
func (g *gateways) site(i int) *config.Config {
	t := g.t
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "site: {id: \"FLEET\", id_field: FarmId}\ngateway: {id: gw-fleet-%04d}\nmetrics: {listen: \"off\"}\n", i)
	fmt.Fprintf(&b, "buses:\n  - name: field\n    url: tcp://%s\n    timeout: 300ms\n    devices:\n", g.bus)
	for _, d := range farmDevices {
		fmt.Fprintf(&b, "      - {name: %s, profile: %s, slave: %d, interval: %v}\n", d.name, d.profile, d.slave, d.interval)
	}
	fmt.Fprintf(&b, "buffer: {path: %s, durability: interval, sync_every: 200ms}\n", filepath.Join(dir, "buffer.db"))
	fmt.Fprintf(&b, "uplink:\n  selector: %s\n  upstreams:\n", g.strat)
	for _, a := range g.addrs {
		fmt.Fprintf(&b, "    - {url: \"mqtt://%s\"}\n", a)
	}
	c, err := config.Parse(filepath.Join(dir, "site.yaml"), []byte(b.String()), g.profiles)
	if err != nil {
		t.Fatalf("site of gateway %d: %v", i, err)
	}
	return c
}
