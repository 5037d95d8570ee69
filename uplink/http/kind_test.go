package http

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/uplink"
	"fieldlink/uplink/internal/httpc"
)

// TestInfluxDBRefusalInWords writes to a database a real InfluxDB does not
// have: the error carries InfluxDB's own message once, plain, and the words
// say what InfluxDB refused and what to do.
func TestInfluxDBRefusalInWords(t *testing.T) {
	d := testtool.StartInfluxd(t)
	h := httpTestPublisher(t, Config{URL: d.URL("/write", url.Values{"db": {"farmx"}}), Encoding: uplink.EncodingInfluxLine})
	p := influxPacket(1, packet.Field{Name: "Rainfall", Value: packet.Float(0.5, 1)})
	err := h.post(context.Background(), []uint64{1}, [][]byte{p.AppendJSON(nil, packet.Strings)})
	var he *httpc.Error
	if !errors.As(err, &he) || he.Kind != httpc.Answer {
		t.Fatalf("error %v: want an *httpc.Error of kind httpc.Answer", err)
	}
	if he.Message != `database not found: "farmx"` {
		t.Errorf("Message %q, want InfluxDB's own: database not found: \"farmx\"", he.Message)
	}
	if msg := err.Error(); !strings.HasSuffix(msg, `: database not found: "farmx"`) || strings.Contains(msg, `\`) {
		t.Errorf("error %q: want InfluxDB's message once, plain, at its end", msg)
	}
	if got, want := uplink.Explain(err), `InfluxDB refused the write: database not found: "farmx" — create it first`; got != want {
		t.Errorf("in words:\n got %q\nwant %q", got, want)
	}
}

// TestHTTPErrorKinds: each way an exchange fails gets its kind where it
// happens, and words of its own.
func TestHTTPErrorKinds(t *testing.T) {
	post := func(t *testing.T, cfg Config) error {
		t.Helper()
		h := httpTestPublisher(t, cfg)
		p := influxPacket(1, packet.Field{Name: "Rainfall", Value: packet.Float(0.5, 1)})
		err := h.post(context.Background(), []uint64{1}, [][]byte{p.AppendJSON(nil, packet.Strings)})
		if err == nil {
			t.Fatal("the post succeeded")
		}
		return err
	}
	check := func(t *testing.T, err error, kind httpc.Kind, words string) {
		t.Helper()
		var he *httpc.Error
		if !errors.As(err, &he) || he.Kind != kind {
			t.Errorf("error %v (%#v): want kind %v", err, he, kind)
		}
		if got := uplink.Explain(err); !strings.Contains(got, words) {
			t.Errorf("in words %q, want it to say %q", got, words)
		}
	}
	t.Run("refused", func(t *testing.T) {
		addr := testtool.RefusedAddr(t)
		check(t, post(t, Config{URL: "http://" + addr + "/ingest"}), httpc.Refused, "connection refused: nothing listens at "+addr)
	})
	t.Run("timeout", func(t *testing.T) {
		srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		check(t, post(t, Config{URL: srv.URL, Timeout: 50 * time.Millisecond}), httpc.Timeout, "no answer in time from "+srv.Listener.Addr().String())
	})
	t.Run("dns", func(t *testing.T) {
		check(t, post(t, Config{URL: "http://no-such-host.invalid/ingest"}), httpc.DNS, "the name no-such-host.invalid is not found")
	})
	t.Run("tls", func(t *testing.T) {
		srv := httpTestNewServer(t, true, func(w http.ResponseWriter, r *http.Request) {})
		check(t, post(t, Config{URL: srv.URL}), httpc.TLS, "TLS with "+srv.Listener.Addr().String()+" failed")
	})
	t.Run("authentication", func(t *testing.T) {
		srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"code":"unauthorized","message":"unauthorized access"}`)
		})
		err := post(t, Config{URL: srv.URL + "/api/v2/write?org=o&bucket=b", Encoding: uplink.EncodingInfluxLine})
		check(t, err, httpc.Auth, "InfluxDB refuses the credentials: 401 Unauthorized: unauthorized access")
	})
	t.Run("the server's refusal", func(t *testing.T) {
		srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, "{\"error\":\"DeviceId \\\"x\\\" unknown\"}\n")
		})
		err := post(t, Config{URL: srv.URL})
		check(t, err, httpc.Answer, `the server refused the write (422 Unprocessable Entity): DeviceId "x" unknown`)
		if strings.Contains(err.Error(), `\`) {
			t.Errorf("error %q escapes the server's message", err)
		}
	})
	// An unreachable network cannot be made on loopback: the kind is
	// decided from the system's error.
	unreach := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 80}, Err: syscall.EHOSTUNREACH}
	check(t, httpc.Failed(http.MethodPost, "http://10.9.8.7/ingest", "", unreach), httpc.Unreachable, "no route to 10.9.8.7:80")
}
