package http

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"fieldlink/uplink"
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

func httpTestPublisher(t *testing.T, cfg Config) *HTTP {
	t.Helper()
	if cfg.GatewayID == "" {
		cfg.GatewayID = "gw-1"
	}
	if cfg.Epoch == "" {
		cfg.Epoch = "ep7"
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func httpTestPacket(seq int) []byte {
	return []byte(`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","DataType":"Rain","GatewayId":"gw-1","Seq":` +
		strconv.Itoa(seq) + `},"DataBody":{"Rainfall":"0"}}`)
}

// The kind is registered for its tests as kinds registers it.
func init() {
	uplink.Register([]string{"http", "https"}, []uplink.Encoding{uplink.EncodingJSON, uplink.EncodingInfluxLine}, Kind{})
}
