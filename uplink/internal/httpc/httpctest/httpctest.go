// Package httpctest is the HTTP server the tests of the uplink's core and
// of its HTTP kind answer from: it records the requests and counts the
// connections. Tests only import it.
package httpctest

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

// Request is a request as the server received it.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// Server is an httptest server that records requests and answers with
// whatever its handler func says; Conns counts accepted connections.
type Server struct {
	*httptest.Server
	Conns    atomic.Int32
	mu       sync.Mutex
	requests []Request
	release  chan struct{} // closed at cleanup: unblocks hanging handlers
}

// NewServer starts a server, over TLS when tlsOn, closed when t ends.
func NewServer(t testing.TB, tlsOn bool, answer func(w http.ResponseWriter, r *http.Request)) *Server {
	t.Helper()
	s := &Server{release: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, Request{r.Method, r.URL.Path, r.Header.Clone(), body})
		s.mu.Unlock()
		answer(w, r)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake failures are expected
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.Conns.Add(1)
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

// Seen returns the requests received so far.
func (s *Server) Seen() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Hang blocks until the client goes away or the test ends.
func (s *Server) Hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.release:
	}
}
