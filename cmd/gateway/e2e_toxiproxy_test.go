package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// e2eNewFaultLink returns a toxiproxy proxy in front of upstream, in-process,
// stopped when the test ends.
func e2eNewFaultLink(t *testing.T, name, upstream string) e2eFaultLink {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy %s: %v", name, err)
	}
	t.Cleanup(p.Stop)
	return &toxiLink{t: t, p: p}
}

// toxiLink is an e2eFaultLink made of one toxiproxy proxy.
type toxiLink struct {
	t *testing.T
	p *toxiproxy.Proxy
}

func (l *toxiLink) Addr() string { return l.p.Listen }

func (l *toxiLink) AddLatency(d time.Duration) {
	toxic := fmt.Sprintf(`{"name":"latency_downstream","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds())
	if _, err := l.p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		l.t.Fatalf("toxiproxy %s: add latency: %v", l.p.Name, err)
	}
}

func (l *toxiLink) RemoveToxics() { l.p.Toxics.ResetToxics(context.Background()) }
func (l *toxiLink) Disable()      { l.p.Stop() }

func (l *toxiLink) Enable() {
	if err := l.p.Start(); err != nil {
		l.t.Fatalf("toxiproxy %s: start again: %v", l.p.Name, err)
	}
}
