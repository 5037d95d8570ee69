package http

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink/internal/httpc"
)

func TestHTTPConnectionReset(t *testing.T) {
	for _, linger := range []bool{false, true} {
		name := "close"
		if linger {
			name = "rst"
		}
		t.Run(name, func(t *testing.T) {
			srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
				c, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					panic(err)
				}
				if linger {
					c.(*net.TCPConn).SetLinger(0) // close sends RST
				}
				c.Close()
			})
			h := httpTestPublisher(t, Config{URL: srv.URL})
			err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
			if err == nil || !httpc.Retryable(err) || refusesPackets(err) {
				t.Fatalf("%v: IsRetryable %v, IsPermanent %v; want retryable only", err, httpc.Retryable(err), refusesPackets(err))
			}
			if !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("error %q does not name the upstream", err)
			}
		})
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	addr := testtool.RefusedAddr(t) // nothing listens there
	h := httpTestPublisher(t, Config{URL: "http://" + addr + "/in"})
	err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
	if !httpc.Retryable(err) || refusesPackets(err) {
		t.Fatalf("%v: IsRetryable %v, IsPermanent %v; want retryable only", err, httpc.Retryable(err), refusesPackets(err))
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name the upstream", err)
	}
}

// httpTestPostWithin posts one packet and fails the test if post has not
// returned within limit (the post is then left to the test's cleanup).
func httpTestPostWithin(t *testing.T, ctx context.Context, h *HTTP, limit time.Duration) (time.Duration, error) {
	t.Helper()
	type result struct {
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		err := h.post(ctx, []uint64{1}, [][]byte{httpTestPacket(1)})
		done <- result{err, time.Since(start)}
	}()
	select {
	case r := <-done:
		return r.elapsed, r.err
	case <-time.After(limit):
		t.Fatalf("Post has not returned after %v", limit)
		return 0, nil
	}
}

func TestHTTPTimeout(t *testing.T) {
	var srv *httpTestServer
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { srv.Hang(r) })
	const timeout = 300 * time.Millisecond
	h := httpTestPublisher(t, Config{URL: srv.URL, Timeout: timeout})

	elapsed, err := httpTestPostWithin(t, context.Background(), h, timeout+2*time.Second)
	if err == nil || !httpc.Retryable(err) || refusesPackets(err) {
		t.Fatalf("%v: IsRetryable %v, IsPermanent %v; want retryable only", err, httpc.Retryable(err), refusesPackets(err))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v is not a deadline", err)
	}
	if elapsed < timeout || elapsed > timeout+time.Second {
		t.Errorf("Post returned after %v, want about %v", elapsed, timeout)
	}

	// A deadline on ctx wins over the default timeout, even a longer one.
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	elapsed, err = httpTestPostWithin(t, ctx, h, 3*timeout+2*time.Second)
	if !httpc.Retryable(err) {
		t.Errorf("%v is not retryable", err)
	}
	if elapsed < 3*timeout || elapsed > 3*timeout+time.Second {
		t.Errorf("with ctx deadline %v, Post returned after %v", 3*timeout, elapsed)
	}
}

func TestHTTPContextCancel(t *testing.T) {
	var srv *httpTestServer
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { srv.Hang(r) })
	h := httpTestPublisher(t, Config{URL: srv.URL, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	elapsed, err := httpTestPostWithin(t, ctx, h, 2*time.Second)
	if elapsed > time.Second {
		t.Errorf("Post returned %v after a cancel at 100ms", elapsed)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if httpc.Retryable(err) || refusesPackets(err) {
		t.Errorf("a cancelled Post is retryable %v, permanent %v; want neither", httpc.Retryable(err), refusesPackets(err))
	}

	// Already cancelled: nothing is sent.
	n := len(srv.Seen())
	if err := h.post(ctx, []uint64{2}, [][]byte{httpTestPacket(2)}); !errors.Is(err, context.Canceled) {
		t.Errorf("Post with a done ctx: %v", err)
	}
	if len(srv.Seen()) != n {
		t.Errorf("Post with a done ctx reached the server")
	}
}

// Keep-alive: posts share one connection, even after error answers with
// long bodies (which must be drained for the connection to be reused).
func TestHTTPKeepAlive(t *testing.T) {
	var n atomic.Int32
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) % 4 {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, strings.Repeat("overloaded ", 1000))
		case 2:
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, strings.Repeat("bad ", 3000))
		default:
			io.WriteString(w, `{"ok":true}`+strings.Repeat(" ", 8000))
		}
	})
	h := httpTestPublisher(t, Config{URL: srv.URL})
	const posts = 24
	for i := range posts {
		_ = h.post(context.Background(), []uint64{uint64(i)}, [][]byte{httpTestPacket(i)})
	}
	if got := len(srv.Seen()); got != posts {
		t.Fatalf("server saw %d requests, want %d", got, posts)
	}
	if got := srv.Conns.Load(); got != 1 {
		t.Errorf("%d posts used %d connections, want 1", posts, got)
	}
}
