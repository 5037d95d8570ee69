package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// testCollector is a component's collector as the handler sees it.
type testCollector struct{ polls, fsyncs *Desc }

func (c testCollector) Families() []*Desc { return []*Desc{c.polls, c.fsyncs} }

func (c testCollector) Collect(s *Scrape) {
	s.Add(c.polls, 101, "rs485-1", "ch4-1")
	s.Add(c.fsyncs, 80)
}

func TestHandler(t *testing.T) {
	var answering atomic.Bool
	ready := func() (bool, string) {
		if !answering.Load() {
			return false, "no device answering (1 devices: 1 not polled yet)"
		}
		return true, ""
	}
	c := testCollector{
		polls:  NewCounter("fieldlink_device_polls_total", "Polls of the device, successful or not.", "bus", "device"),
		fsyncs: NewCounter("fieldlink_buffer_fsyncs_total", "Fsyncs of the buffer file since it was opened."),
	}
	srv := httptest.NewServer(NewHandler([]Collector{c}, HandlerOptions{Ready: ready}))
	defer srv.Close()

	if code, body := testtool.HTTPGet(t, srv.URL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q, want 200 \"ok\\n\"", code, body)
	}
	if code, body := testtool.HTTPGet(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable ||
		body != "not ready: no device answering (1 devices: 1 not polled yet)\n" {
		t.Errorf("/readyz before a device answers: %d %q", code, body)
	}
	answering.Store(true)
	if code, body := testtool.HTTPGet(t, srv.URL+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz once a device answers: %d %q", code, body)
	}

	code, body := testtool.HTTPGet(t, srv.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	for _, want := range []string{
		`fieldlink_device_polls_total{bus="rs485-1",device="ch4-1"} 101`,
		`fieldlink_buffer_fsyncs_total 80`,
		"go_goroutines ",
		"fieldlink_metrics_scrape_errors_total 0",
		"process_resident_memory_bytes ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if code, _ := testtool.HTTPGet(t, srv.URL+"/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", code)
	}
}

// TestHandlerNoReady checks that a nil Ready means ready.
func TestHandlerNoReady(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	if code, _ := testtool.HTTPGet(t, srv.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d, want 200", code)
	}
}

func TestServeRefusesRemote(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:9273", "[2001:db8::1]:9273", "[::ffff:10.0.0.1]:0"} {
		t.Run(addr, func(t *testing.T) {
			err := Serve(t.Context(), addr, http.NotFoundHandler(), false, nil)
			if !errors.Is(err, ErrNotLoopback) {
				t.Errorf("Serve(%q) = %v, want ErrNotLoopback", addr, err)
			}
		})
	}
	if err := Serve(t.Context(), "localhost", http.NotFoundHandler(), false, nil); err == nil {
		t.Error("Serve without a port: no error")
	}
}

// addrHandler hands the addr attribute of the "metrics listening" record
// to a channel.
type addrHandler struct{ addrs chan string }

func (h addrHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h addrHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h addrHandler) WithGroup(string) slog.Handler            { return h }
func (h addrHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "metrics listening" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "addr" {
				h.addrs <- a.Value.String()
			}
			return true
		})
	}
	return nil
}

func TestServe(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		t.Run(listen, func(t *testing.T) {
			if listen == "[::1]:0" {
				if ln, err := net.Listen("tcp", listen); err != nil {
					testtool.Unsupported(t, fmt.Sprintf("no IPv6 loopback: %v", err))
				} else {
					ln.Close()
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			h := addrHandler{addrs: make(chan string, 1)}
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, listen, Handler(), false, slog.New(h)) }()

			var addr string
			select {
			case addr = <-h.addrs:
			case err := <-done:
				t.Fatalf("Serve(%q) = %v before listening", listen, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not start listening")
			}
			if code, body := testtool.HTTPGet(t, "http://"+addr+"/healthz"); code != http.StatusOK || body != "ok\n" {
				t.Errorf("/healthz: %d %q", code, body)
			}

			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve after cancel = %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return after its context ended")
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Errorf("%s still accepts connections after shutdown", addr)
			}
		})
	}
}

func TestServeAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = Serve(t.Context(), ln.Addr().String(), http.NotFoundHandler(), false, nil)
	if err == nil || errors.Is(err, ErrNotLoopback) {
		t.Errorf("Serve on a busy port = %v, want a listen error", err)
	}
}
