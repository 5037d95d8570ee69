package uplink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// probeTestListener listens on loopback and accepts (and holds) connections.
func probeTestListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}

func TestProbeTCP(t *testing.T) {
	p := NewProber(probeTestListener(t), time.Second, time.Second, nil, nil)
	for range 3 {
		rtt, err := p.probeOnce(context.Background())
		if err != nil {
			t.Fatalf("Probe: %v", err)
		}
		if rtt <= 0 || rtt > time.Second {
			t.Errorf("rtt %v", rtt)
		}
	}
}

func TestProbeTCPRefused(t *testing.T) {
	addr := testtool.RefusedAddr(t)
	p := NewProber(addr, time.Second, time.Second, nil, nil)
	rtt, err := p.probeOnce(context.Background())
	if err == nil {
		t.Fatal("probe of a closed port succeeded")
	}
	if rtt != 0 || !strings.Contains(err.Error(), addr) || !IsRetryable(err) {
		t.Errorf("rtt %v, err %v (retryable %v)", rtt, err, IsRetryable(err))
	}
}

func TestProbeHTTP(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
		w.Write([]byte("ok"))
	})
	p := NewProber(srv.URL+"/health", time.Second, time.Second, nil, nil)
	for range 3 {
		rtt, err := p.probeOnce(context.Background())
		if err != nil || rtt <= 0 || rtt > time.Second {
			t.Fatalf("Probe of a healthy URL: %v, %v", rtt, err)
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("3 probes used %d connections, want 1", n)
	}
	status.Store(500)
	rtt, err := p.probeOnce(context.Background())
	if err == nil || rtt != 0 || !strings.Contains(err.Error(), "500") {
		t.Errorf("Probe of a 500: %v, %v", rtt, err)
	}
	if got := srv.seen()[0]; got.Method != http.MethodGet {
		t.Errorf("probe method %s", got.Method)
	}
}

func TestProbeHTTPS(t *testing.T) {
	srv := httpTestNewServer(t, true, func(w http.ResponseWriter, r *http.Request) {})
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	if _, err := NewProber(srv.URL, time.Second, time.Second, &tls.Config{RootCAs: pool}, nil).probeOnce(context.Background()); err != nil {
		t.Errorf("https probe with the server's CA: %v", err)
	}
	if _, err := NewProber(srv.URL, time.Second, time.Second, nil, nil).probeOnce(context.Background()); err == nil {
		t.Error("https probe verified against the system roots succeeded")
	}
}

func TestProbeHTTPTimeout(t *testing.T) {
	var srv *httpTestServer
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { srv.httpTestHang(r) })
	const timeout = 200 * time.Millisecond
	p := NewProber(srv.URL, time.Second, timeout, nil, nil)
	start := time.Now()
	_, err := p.probeOnce(context.Background())
	if elapsed := time.Since(start); err == nil || elapsed < timeout || elapsed > timeout+time.Second {
		t.Errorf("Probe of a silent server: %v after %v", err, elapsed)
	}
}

func TestProbeBadTarget(t *testing.T) {
	p := NewProber("http://h:port/", time.Second, time.Second, nil, nil)
	if _, err := p.probeOnce(context.Background()); err == nil {
		t.Error("probe of a bad URL succeeded")
	}
	p = NewProber("no-port", time.Second, time.Second, nil, nil)
	if _, err := p.probeOnce(context.Background()); err == nil {
		t.Error("probe of a target without port succeeded")
	}
}

type probeTestReport struct {
	rtt time.Duration
	err error
}

func TestProbeRun(t *testing.T) {
	reports := make(chan probeTestReport, 100)
	p := NewProber(probeTestListener(t), 50*time.Millisecond, time.Second, nil, func(rtt time.Duration, err error) {
		reports <- probeTestReport{rtt, err}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { p.Run(ctx); close(done) }()
	for i := range 4 {
		select {
		case r := <-reports:
			if r.err != nil || r.rtt <= 0 {
				t.Errorf("report %d: %v, %v", i, r.rtt, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no report %d", i)
		}
	}
	if elapsed := time.Since(start); elapsed < 3*45*time.Millisecond {
		t.Errorf("4 probes in %v: the interval is not kept", elapsed)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestProbeRunFirstAtOnceAndReportsErrors(t *testing.T) {
	reports := make(chan probeTestReport, 10)
	p := NewProber(testtool.RefusedAddr(t), time.Hour, time.Second, nil, func(rtt time.Duration, err error) {
		reports <- probeTestReport{rtt, err}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	select {
	case r := <-reports:
		if r.err == nil || r.rtt != 0 {
			t.Errorf("report for a closed port: %v, %v", r.rtt, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no report before the first hour-long interval")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// Run returns promptly even with a probe in flight, and does not report it.
func TestProbeRunCancelInFlight(t *testing.T) {
	var srv *httpTestServer
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { srv.httpTestHang(r) })
	var reports atomic.Int32
	p := NewProber(srv.URL, time.Hour, time.Hour, nil, func(time.Duration, error) { reports.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	testtool.WaitFor(t, 5*time.Second, "the probe in flight on the server", func() bool { return len(srv.seen()) > 0 })
	start := time.Now()
	cancel()
	select {
	case <-done:
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("Run returned %v after cancel", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if n := reports.Load(); n != 0 {
		t.Errorf("%d reports of a probe cut short by cancel", n)
	}
}

func TestProbeJitter(t *testing.T) {
	for _, r := range []float64{0, 0.25, 0.5, 0.999, -1, 1, 7} {
		d := probeJitter(time.Second, r)
		if d < 900*time.Millisecond || d >= 1100*time.Millisecond {
			t.Errorf("probeJitter(1s, %v) = %v", r, d)
		}
	}
}

func TestProbeTarget(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mqtt://broker", "broker:1883"},
		{"mqtts://broker", "broker:8883"},
		{"MQTTS://broker:9999", "broker:9999"},
		{"http://ingest/api", "ingest:80"},
		{"https://ingest/api/packets", "ingest:443"},
		{"https://u:p@ingest:8443/x?y=z", "ingest:8443"},
		{"mqtt://[::1]", "[::1]:1883"},
		{"mqtts://[fe80::1]:8884", "[fe80::1]:8884"},
		{"mqtt://10.0.0.7:1884", "10.0.0.7:1884"},
	} {
		got, err := ProbeTarget(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ProbeTarget(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"", "broker:1883", "tcp://broker:1883", "ftp://h", "mqtt://", "mqtt://:1883",
		"mqtt://h:0", "mqtt://h:65536", "mqtt://h:", "mqtt://h:x", "https://u:secret@h:bad/",
	} {
		got, err := ProbeTarget(in)
		if err == nil {
			t.Errorf("ProbeTarget(%q) = %q, want an error", in, got)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("ProbeTarget(%q): error shows the password: %v", in, err)
		}
	}
}

// An MQTT prober publishes on its topic while the connection is up (the
// broker's PUBACK ends it), and falls back to a TCP connect while it is
// down, so that a broker that answers again is seen.
func TestMQTTProber(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	sub := mqttSubscribe(t, b.Addr(), "fl/probe")
	m, stop := mqttRun(t, mqttConfig{URL: b.URL()})
	mqttWaitConnected(t, m, true)
	p := newMQTTProber(m, "fl/probe", time.Second, 5*time.Second, nil)
	if rtt, err := p.probeOnce(context.Background()); err != nil || rtt <= 0 {
		t.Fatalf("probe over the connection: %v, %v", rtt, err)
	}
	testtool.WaitFor(t, 10*time.Second, "the probe's publish reaches a subscriber", func() bool { return sub.count() == 1 })

	stop()
	mqttWaitConnected(t, m, false)
	if rtt, err := p.probeOnce(context.Background()); err != nil || rtt <= 0 {
		t.Errorf("probe with the connection down, the broker up: %v, %v", rtt, err)
	}
	b.Kill()
	if _, err := p.probeOnce(context.Background()); err == nil {
		t.Error("probe with the broker gone: no error")
	}
	if n := sub.count(); n != 1 {
		t.Errorf("%d probe publishes reached the subscriber, want 1 (none while down)", n)
	}
}

// A broker that enforces its ACL by closing the connection of a client
// that publishes where it may not: the prober takes its topic for denied
// after two probes in a row lost the connection under them, says so once,
// and probes with TCP connects from then on, so that the probes stop
// costing the upstream its connection.
func TestMQTTProberDeniedFallsBackToTCP(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	relay := mqttStartRelay(t, b.Addr())
	topic := "fl-probe/s1/gw1"
	relay.cutOn.Store(&topic)
	log, logBuf := mqttLogger(t)
	m, _ := mqttRun(t, mqttConfig{URL: relay.url(), Logger: log})
	p := newMQTTProber(m, topic, time.Second, 5*time.Second, nil)
	for i := range mqttProbeDeniedLosses {
		mqttWaitConnected(t, m, true)
		if p.denied() {
			t.Fatalf("denied after %d probes, want after %d", i, mqttProbeDeniedLosses)
		}
		if _, err := p.probeOnce(context.Background()); err == nil {
			t.Fatalf("probe %d: the relay closed the connection under it, yet no error", i+1)
		}
	}
	if !p.denied() {
		t.Fatalf("not denied after %d probes that each lost the connection (%d cut)", mqttProbeDeniedLosses, relay.cutsOnTopic.Load())
	}
	mqttWaitConnected(t, m, true)
	for i := range 3 {
		if rtt, err := p.probeOnce(context.Background()); err != nil || rtt <= 0 {
			t.Fatalf("probe %d after the fallback: %v, %v", i+1, rtt, err)
		}
	}
	if n := relay.cutsOnTopic.Load(); n != mqttProbeDeniedLosses {
		t.Errorf("the probe topic cost %d connections, want %d", n, mqttProbeDeniedLosses)
	}
	if !m.Connected() {
		t.Error("the connection went down after the fallback")
	}
	if n := strings.Count(logBuf.String(), "probe topic looks denied"); n != 1 {
		t.Errorf("the fallback said %d times in the log, want once", n)
	}
}

// One probe that loses its connection is not a denial: a broker may die
// under any publish. A success in between starts the count over.
func TestMQTTProberOneLossIsNotADenial(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	relay := mqttStartRelay(t, b.Addr())
	topic := "fl-probe/s1/gw1"
	m, _ := mqttRun(t, mqttConfig{URL: relay.url()})
	p := newMQTTProber(m, topic, time.Second, 5*time.Second, nil)
	for range 2 * mqttProbeDeniedLosses {
		mqttWaitConnected(t, m, true)
		relay.cutOn.Store(&topic)
		if _, err := p.probeOnce(context.Background()); err == nil {
			t.Fatal("the relay closed the connection under the probe, yet no error")
		}
		relay.cutOn.Store(nil)
		mqttWaitConnected(t, m, true)
		if _, err := p.probeOnce(context.Background()); err != nil {
			t.Fatalf("probe through a healthy link: %v", err)
		}
	}
	if p.denied() {
		t.Error("denied, though no two probes in a row lost the connection")
	}
}

// A publish probe that failed, or answered far slower than the best so
// far, says the broker is in trouble; small swings do not.
func TestProberTroubled(t *testing.T) {
	p := &Prober{}
	for i, c := range []struct {
		rtt  time.Duration
		err  error
		want bool
	}{
		{2 * time.Millisecond, nil, false},
		{5 * time.Millisecond, nil, false}, // 2.5× the best: a swing
		{1200 * time.Millisecond, nil, true},
		{150 * time.Millisecond, nil, true}, // past 4× and 100 ms more
		{0, errors.New("no PUBACK"), true},
		{90 * time.Millisecond, nil, false}, // within 100 ms of the best
		{time.Millisecond, nil, false},      // a new best
		{80 * time.Millisecond, nil, false},
		{120 * time.Millisecond, nil, true},
	} {
		if got := p.troubled(c.rtt, c.err); got != c.want {
			t.Errorf("%d: %v, %v: troubled %v, want %v", i, c.rtt, c.err, got, c.want)
		}
	}
}

// While a broker's acks do not come, its publish probe runs again soon,
// not an interval later, so that its recovery is seen at once.
func TestMQTTProberProbesATroubledBrokerOften(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	relay := mqttStartRelay(t, b.Addr())
	m, _ := mqttRun(t, mqttConfig{URL: relay.url()})
	mqttWaitConnected(t, m, true)
	var failed, ok atomic.Int64
	p := newMQTTProber(m, "fl-probe/s1/gw1", time.Hour, 100*time.Millisecond, func(_ time.Duration, err error) {
		if err != nil {
			failed.Add(1)
		} else {
			ok.Add(1)
		}
	})
	p.troubledEvery = 20 * time.Millisecond
	relay.swallow.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testtool.WaitFor(t, 10*time.Second, "three failed probes, an hour's interval notwithstanding", func() bool { return failed.Load() >= 3 })
	relay.swallow.Store(false)
	testtool.WaitFor(t, 10*time.Second, "a probe answered once the acks come again", func() bool { return ok.Load() >= 1 })
}

// The pace after each kind of probe: a broker in trouble (a publish
// failed or slow, or the connection down and refusing connects early in
// the outage) is probed again after troubledEvery; a healthy broker, a
// broker that accepts connects while the MQTT connection is down (the
// connection's own backoff retries it), one down for longer than
// mqttProbeDownFor, and a prober without a connection of its own (TCP or
// HTTP) after the interval.
func TestProberNext(t *testing.T) {
	p := &Prober{interval: 10 * time.Second, troubledEvery: time.Second}
	for _, c := range []struct {
		name string
		o    probeOutcome
		want time.Duration
	}{
		{"publish answered", probeOutcome{}, 10 * time.Second},
		{"publish troubled", probeOutcome{troubled: true, failed: true}, time.Second},
		{"down, connect refused", probeOutcome{down: true, failed: true}, time.Second},
		{"down, connect refused for a while", probeOutcome{down: true, failed: true, downFor: mqttProbeDownFor - time.Second}, time.Second},
		{"down, connect refused past mqttProbeDownFor", probeOutcome{down: true, failed: true, downFor: mqttProbeDownFor}, 10 * time.Second},
		{"down, connect answered", probeOutcome{down: true}, 10 * time.Second},
		{"no connection of its own, failed", probeOutcome{failed: true}, 10 * time.Second},
	} {
		if got := p.next(c.o); got != c.want {
			t.Errorf("%s: next %v, want %v", c.name, got, c.want)
		}
	}
	p.interval = 500 * time.Millisecond // never slower than the interval
	if got := p.next(probeOutcome{down: true, failed: true}); got != p.interval {
		t.Errorf("interval shorter than troubledEvery: next %v, want the interval", got)
	}
}

// A prober finds its connection lost between probes and connects to the
// broker at once, then again after troubledEvery while the connects are
// refused, an hour's interval notwithstanding: a restarted broker is seen
// within troubledEvery of accepting connections.
func TestMQTTProberProbesALostBrokerOften(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	relay := mqttStartRelay(t, b.Addr())
	m, _ := mqttRun(t, mqttConfig{URL: relay.url()})
	mqttWaitConnected(t, m, true)
	var failed, ok atomic.Int64
	p := newMQTTProber(m, "fl-probe/s1/gw1", time.Hour, time.Second, func(_ time.Duration, err error) {
		if err != nil {
			failed.Add(1)
		} else {
			ok.Add(1)
		}
	})
	p.troubledEvery = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testtool.WaitFor(t, 10*time.Second, "the first probe answered", func() bool { return ok.Load() >= 1 })
	relay.close() // the connection lost, connects refused
	testtool.WaitFor(t, 10*time.Second, "three failed connects, an hour's interval notwithstanding", func() bool { return failed.Load() >= 3 })
}
