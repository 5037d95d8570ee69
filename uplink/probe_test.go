package uplink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink/internal/httpc"
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
		rtt, err := p.Once(context.Background())
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
	rtt, err := p.Once(context.Background())
	if err == nil {
		t.Fatal("probe of a closed port succeeded")
	}
	if rtt != 0 || !strings.Contains(err.Error(), addr) || !httpc.Retryable(err) {
		t.Errorf("rtt %v, err %v (retryable %v)", rtt, err, httpc.Retryable(err))
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
		rtt, err := p.Once(context.Background())
		if err != nil || rtt <= 0 || rtt > time.Second {
			t.Fatalf("Probe of a healthy URL: %v, %v", rtt, err)
		}
	}
	if n := srv.Conns.Load(); n != 1 {
		t.Errorf("3 probes used %d connections, want 1", n)
	}
	status.Store(500)
	rtt, err := p.Once(context.Background())
	if err == nil || rtt != 0 || !strings.Contains(err.Error(), "500") {
		t.Errorf("Probe of a 500: %v, %v", rtt, err)
	}
	if got := srv.Seen()[0]; got.Method != http.MethodGet {
		t.Errorf("probe method %s", got.Method)
	}
}

func TestProbeHTTPS(t *testing.T) {
	srv := httpTestNewServer(t, true, func(w http.ResponseWriter, r *http.Request) {})
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	if _, err := NewProber(srv.URL, time.Second, time.Second, &tls.Config{RootCAs: pool}, nil).Once(context.Background()); err != nil {
		t.Errorf("https probe with the server's CA: %v", err)
	}
	if _, err := NewProber(srv.URL, time.Second, time.Second, nil, nil).Once(context.Background()); err == nil {
		t.Error("https probe verified against the system roots succeeded")
	}
}

func TestProbeHTTPTimeout(t *testing.T) {
	var srv *httpTestServer
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { srv.Hang(r) })
	const timeout = 200 * time.Millisecond
	p := NewProber(srv.URL, time.Second, timeout, nil, nil)
	start := time.Now()
	_, err := p.Once(context.Background())
	if elapsed := time.Since(start); err == nil || elapsed < timeout || elapsed > timeout+time.Second {
		t.Errorf("Probe of a silent server: %v after %v", err, elapsed)
	}
}

func TestProbeBadTarget(t *testing.T) {
	p := NewProber("http://h:port/", time.Second, time.Second, nil, nil)
	if _, err := p.Once(context.Background()); err == nil {
		t.Error("probe of a bad URL succeeded")
	}
	p = NewProber("no-port", time.Second, time.Second, nil, nil)
	if _, err := p.Once(context.Background()); err == nil {
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
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { srv.Hang(r) })
	var reports atomic.Int32
	p := NewProber(srv.URL, time.Hour, time.Hour, nil, func(time.Duration, error) { reports.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	testtool.WaitFor(t, 5*time.Second, "the probe in flight on the server", func() bool { return len(srv.Seen()) > 0 })
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
