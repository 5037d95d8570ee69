package uplink

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/selector"
)

// newTestPool is a pool on a fresh table whose upstreams are HTTP ingest
// servers that ack everything; its log is returned too.
func newTestPool(t *testing.T) (*Pool, *selector.Table, *testtool.SyncBuffer) {
	t.Helper()
	table := selector.NewTable(selector.Options{})
	var log testtool.SyncBuffer
	p := NewPool(PoolConfig{
		Table: table, Delivery: NewDelivery(nil, table, mustStrategy(t, "least_conn"), DeliveryOptions{}),
		Window: 8, Batch: 10, ProbeInterval: time.Hour, ProbeTimeout: time.Second, GatewayID: "gw-test", Epoch: "e1",
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	t.Cleanup(p.Stop)
	return p, table, &log
}

func ingest(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

func statsByName(table *selector.Table) map[string]selector.Stats {
	out := map[string]selector.Stats{}
	for _, s := range table.Snapshot() {
		out[s.Name] = s
	}
	return out
}

// A registry URL that differs from a site upstream's only in credentials is
// that upstream: it takes no slot of its own, and a later list without it
// does not retire the site's.
func TestReconcileKnowsUpstreamsByName(t *testing.T) {
	p, table, _ := newTestPool(t)
	base := ingest(t)
	site := strings.Replace(base, "http://", "http://site:secret@", 1) + "/api"
	if _, err := p.Add(UpstreamConfig{URL: site, Weight: 3}); err != nil {
		t.Fatal(err)
	}
	reg := strings.Replace(base, "http://", "http://other:pw@", 1) + "/api"
	tmpl := func(ru RegistryUpstream) UpstreamConfig { return UpstreamConfig{URL: ru.URL} }
	if n := p.Reconcile([]RegistryUpstream{{URL: reg, Weight: 9}}, tmpl, 0); n != 0 {
		t.Errorf("Reconcile added %d upstreams for a site upstream's URL with other credentials", n)
	}
	if got := table.Len(); got != 1 {
		t.Fatalf("table holds %d upstreams, want 1", got)
	}
	st := statsByName(table)[base+"/api"]
	if st.Weight != 3 {
		t.Errorf("site upstream's weight = %d, want the site file's 3", st.Weight)
	}
	other := ingest(t) + "/api"
	p.Reconcile([]RegistryUpstream{{URL: other, Weight: 1}}, tmpl, 0)
	st = statsByName(table)[base+"/api"]
	if st.Retired {
		t.Errorf("a registry list without it retired the site upstream")
	}
	if names := p.names(); names[base+"/api"] != "site" || names[other] != "registry" {
		t.Errorf("pool names = %v", names)
	}
}

// The registry's weight changes reach the table; weight 0 drains an
// upstream (kept, not picked) and a positive weight brings it back.
func TestReconcileWeights(t *testing.T) {
	p, table, _ := newTestPool(t)
	u := ingest(t) + "/api"
	tmpl := func(ru RegistryUpstream) UpstreamConfig { return UpstreamConfig{URL: ru.URL} }
	p.Reconcile([]RegistryUpstream{{URL: u, Weight: 2}}, tmpl, time.Hour)
	if st := statsByName(table)[u]; st.Weight != 2 || st.Retired {
		t.Fatalf("after weight 2: %+v", st)
	}
	p.Reconcile([]RegistryUpstream{{URL: u, Weight: 5}}, tmpl, time.Hour)
	if st := statsByName(table)[u]; st.Weight != 5 {
		t.Errorf("weight change ignored: weight %d, want 5", st.Weight)
	}
	p.Reconcile([]RegistryUpstream{{URL: u, Weight: 0}}, tmpl, time.Hour)
	if st := statsByName(table)[u]; !st.Retired {
		t.Errorf("weight 0 did not drain the upstream: %+v", st)
	}
	if _, ok := p.names()[u]; !ok {
		t.Errorf("a drained upstream left the pool; it should stay connected")
	}
	p.Reconcile([]RegistryUpstream{{URL: u, Weight: 1}}, tmpl, time.Hour)
	if st := statsByName(table)[u]; st.Retired || st.Weight != 1 {
		t.Errorf("weight 1 after a drain: %+v", st)
	}
}

// A retired upstream is closed once its grace is over, and Stop closes one
// whose grace is not.
func TestRetireClosesAfterGrace(t *testing.T) {
	p, table, _ := newTestPool(t)
	a, b := ingest(t)+"/a", ingest(t)+"/b"
	for _, u := range []string{a, b} {
		if _, err := p.Add(UpstreamConfig{URL: u}); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	ma, mb := p.live[a], p.live[b]
	p.mu.Unlock()
	ctxA := memberDone(ma)
	if !p.retire(a, 0) || !p.retire(b, time.Hour) {
		t.Fatal("Retire did not find a pool upstream")
	}
	if !statsByName(table)[a].Retired {
		t.Error("retired upstream still pickable")
	}
	select {
	case <-ctxA:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream retired with no grace was never closed")
	}
	if isClosed(mb) {
		t.Fatal("upstream closed before its grace")
	}
	p.Stop()
	if !isClosed(mb) {
		t.Fatal("Stop left a retiring upstream open")
	}
}

func isClosed(m *member) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// memberDone is closed once the member's goroutines were told to end.
func memberDone(m *member) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if closed {
				close(ch)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return ch
}

// A table full of live upstreams refuses the next with an error, and the
// pool keeps the ones it has.
func TestAddBeyondTheCapIsAnError(t *testing.T) {
	p, table, _ := newTestPool(t)
	srv := ingest(t)
	for i := range selector.MaxUpstreams {
		if _, err := p.Add(UpstreamConfig{URL: srv + "/" + strings.Repeat("x", i+1)}); err != nil {
			t.Fatalf("upstream %d: %v", i+1, err)
		}
	}
	_, err := p.Add(UpstreamConfig{URL: srv + "/one-too-many"})
	if err == nil {
		t.Fatalf("the 65th live upstream was accepted (table %d, pool %d)", table.Len(), len(p.names()))
	}
	if table.Len() != selector.MaxUpstreams || len(p.names()) != selector.MaxUpstreams {
		t.Errorf("table %d, pool %d upstreams after a refused add", table.Len(), len(p.names()))
	}
}

// A bad load report names the upstream, not its table index.
func TestBadLoadReportNamesTheUpstream(t *testing.T) {
	p, _, log := newTestPool(t)
	p.report("mqtt://broker-7:1883", 3, []byte("not json"))
	if !strings.Contains(log.String(), "upstream=mqtt://broker-7:1883") {
		t.Errorf("log does not name the upstream: %s", log.String())
	}
}

func TestUpstreamNameHasNoCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"mqtt://broker:1883":                 "mqtt://broker:1883",
		"mqtts://broker:8883":                "mqtts://broker:8883",
		"https://u:p@ingest.example/api":     "https://ingest.example/api",
		"https://u:p@ingest.example/api?k=1": "https://ingest.example/api?...",
	} {
		got, err := UpstreamName(in)
		if err != nil || got != want {
			t.Errorf("UpstreamName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := UpstreamName("ftp://u:secret@x"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("UpstreamName of ftp: err %v (want an error without the password)", err)
	}
}

func mustStrategy(t *testing.T, name string) selector.Strategy {
	s, err := selector.New(name, selector.StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An upstream that cannot be made is named once in the error, without its
// credentials.
func TestAddErrorNamesTheUpstreamOnce(t *testing.T) {
	table := selector.NewTable(selector.Options{})
	p := NewPool(PoolConfig{Table: table, Delivery: NewDelivery(nil, table, mustStrategy(t, "least_conn"), DeliveryOptions{})})
	defer p.Stop()
	for _, tc := range []struct{ url, name string }{
		{"http://u:secret@127.0.0.1:9/api", "http://127.0.0.1:9/api"}, // no GatewayID: the HTTP kind refuses
		{"http://127.0.0.1:9/api", "http://127.0.0.1:9/api"},
	} {
		_, err := p.Add(UpstreamConfig{URL: tc.url, LoadURL: "http://127.0.0.1:9/load"})
		if err == nil {
			t.Fatalf("%s: accepted without a gateway id", tc.url)
		}
		if n := strings.Count(err.Error(), tc.name); n != 1 || strings.Contains(err.Error(), "secret") {
			t.Errorf("error names %s %d times (want once, no password): %v", tc.name, n, err)
		}
	}
}
