package uplink

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
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
