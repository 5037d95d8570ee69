package brokertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"fieldlink/internal/testtool"
)

// Proxy is an in-process toxiproxy proxy from a loopback port to an
// upstream (a broker): the test takes it down, which refuses connections
// and cuts those it carries, and adds toxics to it (latency, a black hole).
// Outages nest: the proxy is up again when the last one has ended. It is
// stopped when the test ends.
type Proxy struct {
	t    testing.TB
	name string
	p    *toxiproxy.Proxy

	mu    sync.Mutex
	downs int // outages holding it down; the proxy runs when 0
}

// NewProxy starts a proxy named name in front of upstream (host:port), or
// fails the test.
func NewProxy(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	// A port of its own below the ephemeral range, not 127.0.0.1:0: the
	// proxy lets it go while down and must have it again when up, and the
	// kernel hands out ephemeral ports to anyone meanwhile.
	var p *toxiproxy.Proxy
	testtool.OnFreshPort(t, func(port int) error {
		p = toxiproxy.NewProxy(srv, name, testtool.LoopbackAddr(port), upstream)
		err := p.Start()
		if err != nil && testtool.PortInUse(err.Error()) {
			return fmt.Errorf("%w: toxiproxy %s: %v", testtool.ErrPortInUse, name, err)
		}
		if err != nil {
			return fmt.Errorf("brokertest: toxiproxy %s: %w", name, err)
		}
		return nil
	})
	x := &Proxy{t: t, name: name, p: p}
	t.Cleanup(func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.downs == 0 {
			p.Stop()
		}
	})
	return x
}

// Name is the proxy's name, as the test gave it.
func (x *Proxy) Name() string { return x.name }

// Addr is the proxy's host:port, for the gateway.
func (x *Proxy) Addr() string { return x.p.Listen }

// Down stops the proxy (refusing connections, cutting the ones it carries)
// unless another outage holds it down already.
func (x *Proxy) Down() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.downs++
	if x.downs == 1 {
		x.p.Stop()
	}
}

// Up ends one outage; the proxy listens again on its port when none is
// left. It fails the test (Errorf) if the port cannot be had again.
func (x *Proxy) Up() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.downs == 0 {
		return
	}
	x.downs--
	if x.downs > 0 {
		return
	}
	var err error
	for range 50 { // the port may take a moment to be free again
		if err = x.p.Start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	x.t.Errorf("toxiproxy %s: listen again on %s: %v", x.name, x.p.Listen, err)
}

// AddToxic adds the toxic that js describes in toxiproxy's JSON, e.g.
// {"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":200}};
// a toxic it refuses fails the test (Errorf).
func (x *Proxy) AddToxic(js string) {
	if _, err := x.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		x.t.Errorf("toxiproxy %s: add toxic %s: %v", x.name, js, err)
	}
}

// RemoveToxic removes the toxic named name; an unknown one fails the test
// (Errorf).
func (x *Proxy) RemoveToxic(name string) {
	if err := x.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		x.t.Errorf("toxiproxy %s: remove toxic %s: %v", x.name, name, err)
	}
}

// Reset removes every toxic.
func (x *Proxy) Reset() { x.p.Toxics.ResetToxics(context.Background()) }
