package http

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
)

// TestHTTPSenderRefusedConnectionIsDown: a refused connection marks the
// upstream down at once, as a failed probe would; a probe that answers
// brings it back.
func TestHTTPSenderRefusedConnectionIsDown(t *testing.T) {
	addr := testtool.RefusedAddr(t) // nothing listens: connections are refused
	s := NewSender(httpTestPublisher(t, Config{URL: "http://" + addr + "/ingest"}), 1, 1)
	s.ProbeResult(nil)
	if !s.Up() {
		t.Fatal("down after a successful probe")
	}
	err := s.Send(context.Background(), []buffer.Record{{Seq: 1, Data: httpTestPacket(1)}})
	if err == nil || !dialFailed(err) {
		t.Fatalf("Send to a closed port: %v, want a dial failure", err)
	}
	if s.Up() {
		t.Fatal("still up after a refused connection")
	}
	s.ProbeResult(nil)
	if !s.Up() {
		t.Fatal("still down after a probe answered")
	}
}

// TestHTTPSenderRefusalRule pins the one rule that tells packets refused
// (dead-lettered after a resend one by one) from an upstream that failed
// (records stay in the buffer), and which answers carry a Retry-After the
// loop honours.
func TestHTTPSenderRefusalRule(t *testing.T) {
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(code)
	})
	for _, tc := range []struct {
		code       int
		refused    bool
		retryAfter time.Duration
	}{
		{400, true, 0},  // the packets are malformed
		{413, true, 0},  // too large: resent alone, dead-lettered if still too large
		{422, true, 0},  // well-formed but refused
		{401, false, 0}, // credentials: the upstream's configuration
		{403, false, 0},
		{404, false, 0}, // wrong path
		{405, false, 0},
		{408, false, 0},
		{409, false, 0}, // the same Idempotency-Key still in progress
		{410, false, 0},
		{415, false, 0},
		{418, false, 0}, // a 4xx the rule does not name: keep the packets
		{425, false, 0},
		{429, false, 7 * time.Second},
		{500, false, 0},
		{502, false, 0},
		{503, false, 7 * time.Second},
		{308, false, 0},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			s := NewSender(httpTestPublisher(t, Config{URL: srv.URL + "/" + strconv.Itoa(tc.code)}), 10, 1)
			err := s.Send(context.Background(), []buffer.Record{{Seq: 1, Data: httpTestPacket(1)}, {Seq: 2, Data: httpTestPacket(2)}})
			if err == nil {
				t.Fatal("Send succeeded")
			}
			var p interface{ Permanent() bool }
			if refused := errors.As(err, &p) && p.Permanent(); refused != tc.refused {
				t.Errorf("%v: refuses the packets %v, want %v", err, refused, tc.refused)
			}
			var ra interface{ RetryAfter() time.Duration }
			var got time.Duration
			if errors.As(err, &ra) {
				got = ra.RetryAfter()
			}
			if got != tc.retryAfter {
				t.Errorf("%v: retry after %v, want %v", err, got, tc.retryAfter)
			}
		})
	}
	// A packet that is not JSON is refused without being sent.
	s := NewSender(httpTestPublisher(t, Config{URL: srv.URL + "/200"}), 10, 1)
	err := s.Send(context.Background(), []buffer.Record{{Seq: 1, Data: []byte(`{"DataHead":`)}})
	var p interface{ Permanent() bool }
	if !errors.As(err, &p) || !p.Permanent() {
		t.Errorf("invalid packet: %v, want a permanent error", err)
	}
}
