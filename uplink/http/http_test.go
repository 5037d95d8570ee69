package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink/internal/httpc"
)

func TestHTTPPostSingle(t *testing.T) {
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	h := httpTestPublisher(t, Config{
		URL:      srv.URL + "/api/packets",
		Header:   http.Header{"X-Site": {"farm-001"}, "Content-Type": {"text/plain"}},
		Username: "gw", Password: "pw",
	})
	p := httpTestPacket(42)
	if err := h.post(context.Background(), []uint64{42}, [][]byte{p}); err != nil {
		t.Fatalf("Post: %v", err)
	}
	reqs := srv.Seen()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/api/packets" {
		t.Errorf("request %s %s, want POST /api/packets", r.Method, r.Path)
	}
	if !bytes.Equal(r.Body, p) {
		t.Errorf("body\n%s\nwant the packet as is\n%s", r.Body, p)
	}
	if got := r.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	if got, want := r.Header.Values("Idempotency-Key"), []string{"gw-1:ep7:42-42"}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("Idempotency-Key %q, want %q", got, want)
	}
	if got := r.Header.Get("X-Site"); got != "farm-001" {
		t.Errorf("X-Site %q", got)
	}
	req := http.Request{Header: r.Header}
	if u, pw, ok := req.BasicAuth(); !ok || u != "gw" || pw != "pw" {
		t.Errorf("basic auth %q %q %v", u, pw, ok)
	}
}

func TestHTTPPostBatch(t *testing.T) {
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {})
	h := httpTestPublisher(t, Config{URL: srv.URL})
	batch := [][]byte{httpTestPacket(5), httpTestPacket(6), httpTestPacket(7)}
	if err := h.post(context.Background(), []uint64{5, 6, 7}, batch); err != nil {
		t.Fatalf("Post: %v", err)
	}
	r := srv.Seen()[0]
	want := "[" + string(batch[0]) + "," + string(batch[1]) + "," + string(batch[2]) + "]"
	if string(r.Body) != want {
		t.Errorf("body\n%s\nwant\n%s", r.Body, want)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(r.Body, &arr); err != nil || len(arr) != 3 {
		t.Errorf("body is not a JSON array of 3: %v", err)
	}
	if got := r.Header.Get("Idempotency-Key"); got != "gw-1:ep7:5-7" {
		t.Errorf("Idempotency-Key %q", got)
	}
	if got := r.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
}

func TestHTTPidempotencyKey(t *testing.T) {
	if got := idempotencyKey("gw-01", "7f3a", 1200, 1299); got != "gw-01:7f3a:1200-1299" {
		t.Errorf("idempotencyKey = %q", got)
	}
}

func TestHTTPInvalidPacket(t *testing.T) {
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {})
	h := httpTestPublisher(t, Config{URL: srv.URL})
	err := h.post(context.Background(), []uint64{1, 2}, [][]byte{httpTestPacket(1), []byte(`{"DataHead":`)})
	if !errors.Is(err, errInvalidPacket) || !refusesPackets(err) {
		t.Errorf("error %v, want errInvalidPacket, permanent", err)
	}
	if !strings.Contains(err.Error(), "seq 2") {
		t.Errorf("error %q does not name the packet", err)
	}
	for _, tc := range []struct {
		seqs  []uint64
		batch [][]byte
	}{
		{nil, nil},
		{[]uint64{1}, [][]byte{httpTestPacket(1), httpTestPacket(2)}},
	} {
		if err := h.post(context.Background(), tc.seqs, tc.batch); err == nil || refusesPackets(err) || httpc.Retryable(err) {
			t.Errorf("Post(%v, %d packets) = %v", tc.seqs, len(tc.batch), err)
		}
	}
	if n := len(srv.Seen()); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

func TestHTTPRedirectNotFollowed(t *testing.T) {
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusPermanentRedirect)
		}
	})
	h := httpTestPublisher(t, Config{URL: srv.URL + "/old"})
	err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
	var he *httpc.Error
	if !errors.As(err, &he) || he.StatusCode != http.StatusPermanentRedirect {
		t.Fatalf("error %v, want the 308", err)
	}
	if refusesPackets(err) || httpc.Retryable(err) {
		t.Errorf("308: permanent %v, retryable %v; want neither", refusesPackets(err), httpc.Retryable(err))
	}
	if n := len(srv.Seen()); n != 1 {
		t.Errorf("%d requests: the redirect was followed", n)
	}
}

func TestHTTPConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no URL":          {GatewayID: "g", Epoch: "e"},
		"mqtt scheme":     {URL: "mqtt://h:1883", GatewayID: "g", Epoch: "e"},
		"no host":         {URL: "http:///x", GatewayID: "g", Epoch: "e"},
		"no gateway":      {URL: "http://h/", Epoch: "e"},
		"no epoch":        {URL: "http://h/", GatewayID: "g"},
		"non-ASCII id":    {URL: "http://h/", GatewayID: "gw-é", Epoch: "e"},
		"negative time":   {URL: "http://h/", GatewayID: "g", Epoch: "e", Timeout: -time.Second},
		"colon in user":   {URL: "http://h/", GatewayID: "g", Epoch: "e", Username: "a:b"},
		"control in id":   {URL: "http://h/", GatewayID: "g\n", Epoch: "e"},
		"unparseable URL": {URL: "http://h:port/", GatewayID: "g", Epoch: "e"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		} else if !strings.HasPrefix(err.Error(), "uplink: http") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
	h, err := New(Config{URL: "HTTPS://u:p@ingest.example.net:8443/api?key=k#frag", GatewayID: "g", Epoch: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Name(), "https://ingest.example.net:8443/api?..."; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
}

// TestHTTPLogsReached checks that an HTTP upstream says when it is first
// reached, and again after an outage, as an MQTT upstream logs "mqtt
// connected": without it a gateway with only HTTP upstreams logs nothing
// about them at start.
func TestHTTPLogsReached(t *testing.T) {
	var fail atomic.Bool
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	var logs testtool.SyncBuffer
	h := httpTestPublisher(t, Config{URL: srv.URL, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	reached := func() int { return strings.Count(logs.String(), "http upstream reached") }
	for i, step := range []struct {
		fail bool
		want int
	}{{false, 1}, {false, 1}, {true, 1}, {false, 2}} {
		fail.Store(step.fail)
		err := h.post(context.Background(), []uint64{uint64(i + 1)}, [][]byte{httpTestPacket(i + 1)})
		if (err != nil) != step.fail {
			t.Fatalf("post %d: %v", i, err)
		}
		if got := reached(); got != step.want {
			t.Fatalf("after post %d: %d lines \"http upstream reached\", want %d:\n%s", i, got, step.want, logs.String())
		}
	}
}
