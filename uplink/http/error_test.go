package http

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"fieldlink/uplink/internal/httpc"
)

func TestHTTPClientError(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 413, 422} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			body := `{"error":"bad packet"}` + strings.Repeat("x", 5000)
			srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(code)
				io.WriteString(w, body)
			})
			h := httpTestPublisher(t, Config{URL: srv.URL + "/in?token=abc123"})
			err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
			if httpc.Retryable(err) {
				t.Fatalf("%v: retryable", err)
			}
			var he *httpc.Error
			if !errors.As(err, &he) || he.StatusCode != code {
				t.Fatalf("error %#v, want an *httpc.Error with status %d", err, code)
			}
			if len(he.Body) > httpc.ExcerptLen || !strings.HasPrefix(he.Body, `{"error":"bad packet"}`) {
				t.Errorf("excerpt %d bytes %q", len(he.Body), he.Body)
			}
			msg := err.Error()
			for _, want := range []string{srv.URL + "/in?...", strconv.Itoa(code), "bad packet"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			if strings.Contains(msg, "abc123") {
				t.Errorf("error %q shows the query", msg)
			}
			if len(msg) > 400 {
				t.Errorf("error is %d bytes long", len(msg))
			}
		})
	}
}

func TestHTTPRetryableStatus(t *testing.T) {
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		code       int
		retryAfter string
		want       time.Duration // approximate for dates
	}{
		{408, "", 0},
		{409, "", 0},
		{429, "7", 7 * time.Second},
		{500, "", 0},
		{502, "", 0},
		{503, date, 90 * time.Second},
		{504, "", 0},
	} {
		t.Run(http.StatusText(tc.code), func(t *testing.T) {
			srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.code)
				io.WriteString(w, "try later")
			})
			h := httpTestPublisher(t, Config{URL: srv.URL})
			err := h.post(context.Background(), []uint64{1, 2}, [][]byte{httpTestPacket(1), httpTestPacket(2)})
			if !httpc.Retryable(err) || refusesPackets(err) {
				t.Fatalf("%v: IsRetryable %v, IsPermanent %v; want retryable only", err, httpc.Retryable(err), refusesPackets(err))
			}
			var got time.Duration
			if he := (*httpc.Error)(nil); errors.As(err, &he) {
				got = he.RetryAfter
			}
			if d := got - tc.want; d < -2*time.Second || d > 0 || (tc.want == 0 && got != 0) {
				t.Errorf("RetryAfter = %v, want about %v", got, tc.want)
			}
			if !strings.Contains(err.Error(), strconv.Itoa(tc.code)) || !strings.Contains(err.Error(), "try later") {
				t.Errorf("error %q lacks the status or the excerpt", err)
			}
		})
	}
}

func TestHTTPRetryAfterParse(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{" 120 ", 2 * time.Minute},
		{"-5", 0},
		{"soon", 0},
		{"99999999999999999999", httpc.MaxRetryAfter},
		{"999999999", httpc.MaxRetryAfter},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), httpc.MaxRetryAfter},
	} {
		if got := httpc.ParseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("httpc.ParseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestHTTPClassifyTransportErrors(t *testing.T) {
	for _, tc := range []struct {
		err       error
		retryable bool
	}{
		{nil, false},
		{errors.New("something"), false},
		{context.Canceled, false},
		{context.DeadlineExceeded, true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{&net.DNSError{Err: "no such host", Name: "ingest"}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("network is down")}, true},
		{&net.OpError{Op: "remote error", Err: tls.AlertError(42)}, false},
		{x509.UnknownAuthorityError{}, false},
		{&httpc.Error{Method: "POST", URL: "u", Err: io.EOF}, true},
		{&httpc.Error{Method: "POST", URL: "u", StatusCode: 304}, false},
		{&httpc.Error{Method: "POST", URL: "u", StatusCode: 425}, true},
	} {
		if got := httpc.Retryable(tc.err); got != tc.retryable {
			t.Errorf("httpc.Retryable(%v) = %v", tc.err, got)
		}
		if refusesPackets(tc.err) {
			t.Errorf("refusesPackets(%v) = true", tc.err)
		}
	}
}
