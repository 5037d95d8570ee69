package uplink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"fieldlink/uplink/internal/httpc"
)

// httpTestRequest is what an httpTestServer saw of one request.
type httpTestRequest struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// httpTestServer is an httptest server that records requests and answers
// with whatever its handler func says; it counts accepted connections.
type httpTestServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []httpTestRequest
	conns    atomic.Int32
	release  chan struct{} // closed at cleanup: unblocks hanging handlers
}

func httpTestNewServer(t *testing.T, tlsOn bool, answer func(w http.ResponseWriter, r *http.Request)) *httpTestServer {
	t.Helper()
	s := &httpTestServer{release: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, httpTestRequest{r.Method, r.URL.Path, r.Header.Clone(), body})
		s.mu.Unlock()
		answer(w, r)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake failures are expected
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tlsOn {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.release) }) // runs first: handlers return, Close can finish
	return s
}

func (s *httpTestServer) seen() []httpTestRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]httpTestRequest(nil), s.requests...)
}

// httpTestHang blocks until the client goes away or the test ends.
func (s *httpTestServer) httpTestHang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.release:
	}
}

// httpTestSender is the sender of an HTTP upstream at url, opened by its
// kind (registered by kinds_test.go) with the pool's defaults for batch
// and window.
func httpTestSender(t *testing.T, url string, batch, window int) Sender {
	t.Helper()
	c, err := Open(UpstreamConfig{URL: url}, PoolConfig{Batch: batch, Window: window * 8, GatewayID: "gw-1", Epoch: "ep7"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.Sender
}

// permanentErr is an upstream's refusal of the packets.
type permanentErr struct{ error }

func (permanentErr) Permanent() bool { return true }
func (p permanentErr) Unwrap() error { return p.error }

// IsRetryable reports whether err is a transient failure, worth retrying
// soon, on this or another upstream: an answer 408, 409, 425, 429 or 5xx, or
// no answer because of a timeout (including ctx's deadline), a refused,
// reset, aborted or unreachable connection, a connection closed before the
// answer (EOF), or a DNS failure. The delivery loop treats every failure but
// a refusal of the packets alike; the tests use this to check that errors
// keep what tells them apart.
//
// Errors that are not retryable: the caller cancelled ctx; TLS failures (an
// unverifiable certificate, a TLS alert: configuration, not weather); a
// 1xx/3xx answer (redirects are not followed); 4xx other than those above;
// bad arguments.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var he *httpc.Error
	if errors.As(err, &he) && he.StatusCode != 0 {
		return httpRetryableStatus(he.StatusCode)
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if httpIsTLSFailure(err) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, target := range []error{
		syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		io.EOF, io.ErrUnexpectedEOF,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr)
}

func httpRetryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500 && code <= 599
}

func httpIsTLSFailure(err error) bool {
	var (
		cve   *tls.CertificateVerificationError
		alert tls.AlertError
		rhe   tls.RecordHeaderError
		uae   x509.UnknownAuthorityError
		hoste x509.HostnameError
		cie   x509.CertificateInvalidError
	)
	if errors.As(err, &cve) || errors.As(err, &alert) || errors.As(err, &rhe) ||
		errors.As(err, &uae) || errors.As(err, &hoste) || errors.As(err, &cie) {
		return true
	}
	// crypto/tls reports alerts as *net.OpError with these ops.
	var opErr *net.OpError
	return errors.As(err, &opErr) && (opErr.Op == "remote error" || opErr.Op == "local error")
}
