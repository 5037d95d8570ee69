package uplink

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
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

func httpTestPublisher(t *testing.T, cfg HTTPConfig) *HTTP {
	t.Helper()
	if cfg.GatewayID == "" {
		cfg.GatewayID = "gw-1"
	}
	if cfg.Epoch == "" {
		cfg.Epoch = "ep7"
	}
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func httpTestPacket(seq int) []byte {
	return []byte(`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","DataType":"Rain","GatewayId":"gw-1","Seq":` +
		strconv.Itoa(seq) + `},"DataBody":{"Rainfall":"0"}}`)
}

func TestHTTPPostSingle(t *testing.T) {
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	h := httpTestPublisher(t, HTTPConfig{
		URL:      srv.URL + "/api/packets",
		Header:   http.Header{"X-Site": {"farm-001"}, "Content-Type": {"text/plain"}},
		Username: "gw", Password: "pw",
	})
	p := httpTestPacket(42)
	if err := h.post(context.Background(), []uint64{42}, [][]byte{p}); err != nil {
		t.Fatalf("Post: %v", err)
	}
	reqs := srv.seen()
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
	h := httpTestPublisher(t, HTTPConfig{URL: srv.URL})
	batch := [][]byte{httpTestPacket(5), httpTestPacket(6), httpTestPacket(7)}
	if err := h.post(context.Background(), []uint64{5, 6, 7}, batch); err != nil {
		t.Fatalf("Post: %v", err)
	}
	r := srv.seen()[0]
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

func TestHTTPClientError(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 413, 422} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			body := `{"error":"bad packet"}` + strings.Repeat("x", 5000)
			srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(code)
				io.WriteString(w, body)
			})
			h := httpTestPublisher(t, HTTPConfig{URL: srv.URL + "/in?token=abc123"})
			err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
			if IsRetryable(err) {
				t.Fatalf("%v: retryable", err)
			}
			var he *httpError
			if !errors.As(err, &he) || he.StatusCode != code {
				t.Fatalf("error %#v, want an *httpError with status %d", err, code)
			}
			if len(he.Body) > httpExcerptLen || !strings.HasPrefix(he.Body, `{"error":"bad packet"}`) {
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
			h := httpTestPublisher(t, HTTPConfig{URL: srv.URL})
			err := h.post(context.Background(), []uint64{1, 2}, [][]byte{httpTestPacket(1), httpTestPacket(2)})
			if !IsRetryable(err) || refusesPackets(err) {
				t.Fatalf("%v: IsRetryable %v, IsPermanent %v; want retryable only", err, IsRetryable(err), refusesPackets(err))
			}
			var got time.Duration
			if he := (*httpError)(nil); errors.As(err, &he) {
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
		{"99999999999999999999", httpMaxRetryAfter},
		{"999999999", httpMaxRetryAfter},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), httpMaxRetryAfter},
	} {
		if got := httpParseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("httpParseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

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
			h := httpTestPublisher(t, HTTPConfig{URL: srv.URL})
			err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
			if err == nil || !IsRetryable(err) || refusesPackets(err) {
				t.Fatalf("%v: IsRetryable %v, IsPermanent %v; want retryable only", err, IsRetryable(err), refusesPackets(err))
			}
			if !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("error %q does not name the upstream", err)
			}
		})
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	addr := testtool.FreeAddr(t) // nothing listens there
	h := httpTestPublisher(t, HTTPConfig{URL: "http://" + addr + "/in"})
	err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
	if !IsRetryable(err) || refusesPackets(err) {
		t.Fatalf("%v: IsRetryable %v, IsPermanent %v; want retryable only", err, IsRetryable(err), refusesPackets(err))
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name the upstream", err)
	}
}

// httpTestPostWithin posts one packet and fails the test if Post has not
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
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { srv.httpTestHang(r) })
	const timeout = 300 * time.Millisecond
	h := httpTestPublisher(t, HTTPConfig{URL: srv.URL, Timeout: timeout})

	elapsed, err := httpTestPostWithin(t, context.Background(), h, timeout+2*time.Second)
	if err == nil || !IsRetryable(err) || refusesPackets(err) {
		t.Fatalf("%v: IsRetryable %v, IsPermanent %v; want retryable only", err, IsRetryable(err), refusesPackets(err))
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
	if !IsRetryable(err) {
		t.Errorf("%v is not retryable", err)
	}
	if elapsed < 3*timeout || elapsed > 3*timeout+time.Second {
		t.Errorf("with ctx deadline %v, Post returned after %v", 3*timeout, elapsed)
	}
}

func TestHTTPContextCancel(t *testing.T) {
	var srv *httpTestServer
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) { srv.httpTestHang(r) })
	h := httpTestPublisher(t, HTTPConfig{URL: srv.URL, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	elapsed, err := httpTestPostWithin(t, ctx, h, 2*time.Second)
	if elapsed > time.Second {
		t.Errorf("Post returned %v after a cancel at 100ms", elapsed)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if IsRetryable(err) || refusesPackets(err) {
		t.Errorf("a cancelled Post is retryable %v, permanent %v; want neither", IsRetryable(err), refusesPackets(err))
	}

	// Already cancelled: nothing is sent.
	n := len(srv.seen())
	if err := h.post(ctx, []uint64{2}, [][]byte{httpTestPacket(2)}); !errors.Is(err, context.Canceled) {
		t.Errorf("Post with a done ctx: %v", err)
	}
	if len(srv.seen()) != n {
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
	h := httpTestPublisher(t, HTTPConfig{URL: srv.URL})
	const posts = 24
	for i := range posts {
		_ = h.post(context.Background(), []uint64{uint64(i)}, [][]byte{httpTestPacket(i)})
	}
	if got := len(srv.seen()); got != posts {
		t.Fatalf("server saw %d requests, want %d", got, posts)
	}
	if got := srv.conns.Load(); got != 1 {
		t.Errorf("%d posts used %d connections, want 1", posts, got)
	}
}

// httpTestCA returns a pool holding a fresh CA that signed nothing.
func httpTestCA(t *testing.T) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fieldlink test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

func TestHTTPTLS(t *testing.T) {
	srv := httpTestNewServer(t, true, func(w http.ResponseWriter, r *http.Request) {})
	good := x509.NewCertPool()
	good.AddCert(srv.Certificate())

	h := httpTestPublisher(t, HTTPConfig{URL: srv.URL, TLS: &tls.Config{RootCAs: good}})
	if err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)}); err != nil {
		t.Fatalf("Post over TLS with the server's CA: %v", err)
	}

	for name, cfg := range map[string]*tls.Config{
		"system roots": nil,
		"empty config": {},
		"other CA":     {RootCAs: httpTestCA(t)},
	} {
		t.Run(name, func(t *testing.T) {
			h := httpTestPublisher(t, HTTPConfig{URL: srv.URL, TLS: cfg})
			err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
			if err == nil {
				t.Fatal("Post succeeded with a CA that did not sign the server's certificate")
			}
			var cve *tls.CertificateVerificationError
			if !errors.As(err, &cve) {
				t.Errorf("error %v is not a certificate verification error", err)
			}
			if refusesPackets(err) || IsRetryable(err) {
				t.Errorf("TLS failure: permanent %v, retryable %v; want neither", refusesPackets(err), IsRetryable(err))
			}
		})
	}
	if got := len(srv.seen()); got != 1 {
		t.Errorf("server handled %d requests, want only the verified one", got)
	}
}

func TestHTTPSecretsNeverShown(t *testing.T) {
	const user, password = "gateway-7", "S3cret-Pa55w0rd!"
	token := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	var logs testtool.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// The server echoes the request's credentials back in its error bodies.
	var srv *httpTestServer
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			srv.httpTestHang(r)
		case "/ok":
		default:
			_, pw, _ := r.BasicAuth()
			w.WriteHeader(map[string]int{"/401": 401, "/500": 500}[r.URL.Path])
			io.WriteString(w, "auth was "+r.Header.Get("Authorization")+" password "+pw)
		}
	})
	tlsSrv := httpTestNewServer(t, true, func(w http.ResponseWriter, r *http.Request) {})
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()

	var errs []error
	for _, cfg := range []HTTPConfig{
		{URL: srv.URL + "/ok", Username: user, Password: password},
		{URL: srv.URL + "/401", Username: user, Password: password},
		{URL: srv.URL + "/500", Username: user, Password: password},
		{URL: strings.Replace(srv.URL, "http://", "http://"+user+":"+password+"@", 1) + "/401"},
		{URL: srv.URL + "/hang", Username: user, Password: password, Timeout: 100 * time.Millisecond},
		{URL: "http://" + user + ":" + password + "@" + deadAddr + "/x"},
		{URL: tlsSrv.URL, Username: user, Password: password},
		{URL: "ftp://" + user + ":" + password + "@example.com/"},
		{URL: "http://" + user + ":" + password + "@example.com:bad/"},
	} {
		cfg.Logger = logger
		cfg.GatewayID, cfg.Epoch = "gw", "ep"
		h, err := NewHTTP(cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if name := h.Name(); strings.Contains(name, password) || strings.Contains(name, user) {
			t.Errorf("Name() = %q shows credentials", name)
		}
		errs = append(errs, h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)}))
		h.Close()
	}
	var nerr int
	for _, err := range errs {
		if err == nil {
			continue
		}
		nerr++
		msg := err.Error()
		if strings.Contains(msg, password) || strings.Contains(msg, token) {
			t.Errorf("error shows a secret: %s", msg)
		}
	}
	if nerr < 7 {
		t.Errorf("only %d errors: the scenarios did not run", nerr)
	}
	if !strings.Contains(logs.String(), "uplink: http post") {
		t.Errorf("no log lines captured:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), password) || strings.Contains(logs.String(), token) {
		t.Errorf("a log line shows a secret:\n%s", logs.String())
	}
	// The echoing server did see the credentials: the test is not vacuous.
	for _, r := range srv.seen() {
		if r.Path == "/401" && r.Header.Get("Authorization") != "Basic "+token {
			t.Errorf("request to /401 had Authorization %q", r.Header.Get("Authorization"))
		}
	}
}

func TestHTTPInvalidPacket(t *testing.T) {
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {})
	h := httpTestPublisher(t, HTTPConfig{URL: srv.URL})
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
		if err := h.post(context.Background(), tc.seqs, tc.batch); err == nil || refusesPackets(err) || IsRetryable(err) {
			t.Errorf("Post(%v, %d packets) = %v", tc.seqs, len(tc.batch), err)
		}
	}
	if n := len(srv.seen()); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

func TestHTTPRedirectNotFollowed(t *testing.T) {
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusPermanentRedirect)
		}
	})
	h := httpTestPublisher(t, HTTPConfig{URL: srv.URL + "/old"})
	err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
	var he *httpError
	if !errors.As(err, &he) || he.StatusCode != http.StatusPermanentRedirect {
		t.Fatalf("error %v, want the 308", err)
	}
	if refusesPackets(err) || IsRetryable(err) {
		t.Errorf("308: permanent %v, retryable %v; want neither", refusesPackets(err), IsRetryable(err))
	}
	if n := len(srv.seen()); n != 1 {
		t.Errorf("%d requests: the redirect was followed", n)
	}
}

func TestHTTPConfigErrors(t *testing.T) {
	for name, cfg := range map[string]HTTPConfig{
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
		if _, err := NewHTTP(cfg); err == nil {
			t.Errorf("%s: NewHTTP accepted %+v", name, cfg)
		} else if !strings.HasPrefix(err.Error(), "uplink: http") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
	h, err := NewHTTP(HTTPConfig{URL: "HTTPS://u:p@ingest.example.net:8443/api?key=k#frag", GatewayID: "g", Epoch: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Name(), "https://ingest.example.net:8443/api?..."; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
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
		{&httpError{Method: "POST", URL: "u", Err: io.EOF}, true},
		{&httpError{Method: "POST", URL: "u", StatusCode: 304}, false},
		{&httpError{Method: "POST", URL: "u", StatusCode: 425}, true},
	} {
		if got := IsRetryable(tc.err); got != tc.retryable {
			t.Errorf("IsRetryable(%v) = %v", tc.err, got)
		}
		if refusesPackets(tc.err) {
			t.Errorf("refusesPackets(%v) = true", tc.err)
		}
	}
}

// TestHTTPSRefusesBadServerCertificates: over https:// an expired server
// certificate and one for another host name are refused with a
// verification error, by the CA that signed them, and the server sees no
// request.
func TestHTTPSRefusesBadServerCertificates(t *testing.T) {
	certs := mqttMakeCerts(t)
	for _, tc := range []struct {
		name, cert, host, want string
	}{
		{"expired", certs.expiredCert, "127.0.0.1", "expired"},
		{"another host name", certs.wrongNameCert, "localhost", "not localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := tls.LoadX509KeyPair(tc.cert, certs.serverKey)
			if err != nil {
				t.Fatal(err)
			}
			var hits atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
			srv.StartTLS()
			defer srv.Close()
			cfg, err := TLSConfig(certs.ca, "", "", false)
			if err != nil {
				t.Fatal(err)
			}
			url := "https://" + tc.host + ":" + strings.Split(srv.Listener.Addr().String(), ":")[1]
			h := httpTestPublisher(t, HTTPConfig{URL: url, TLS: cfg})
			err = h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
			var cve *tls.CertificateVerificationError
			if !errors.As(err, &cve) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Post error = %v, want a certificate verification error saying %q", err, tc.want)
			}
			if hits.Load() != 0 {
				t.Fatalf("the server handled %d requests", hits.Load())
			}
		})
	}
}

// TestHTTPSenderRefusedConnectionIsDown: a refused connection marks the
// upstream down at once, as a failed probe would; a probe that answers
// brings it back.
func TestHTTPSenderRefusedConnectionIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connections are refused
	s := NewHTTPSender(httpTestPublisher(t, HTTPConfig{URL: "http://" + addr + "/ingest"}), 1, 1)
	s.ProbeResult(nil)
	if !s.Up() {
		t.Fatal("down after a successful probe")
	}
	err = s.Send(context.Background(), []buffer.Record{{Seq: 1, Data: httpTestPacket(1)}})
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
			s := NewHTTPSender(httpTestPublisher(t, HTTPConfig{URL: srv.URL + "/" + strconv.Itoa(tc.code)}), 10, 1)
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
	s := NewHTTPSender(httpTestPublisher(t, HTTPConfig{URL: srv.URL + "/200"}), 10, 1)
	err := s.Send(context.Background(), []buffer.Record{{Seq: 1, Data: []byte(`{"DataHead":`)}})
	var p interface{ Permanent() bool }
	if !errors.As(err, &p) || !p.Permanent() {
		t.Errorf("invalid packet: %v, want a permanent error", err)
	}
}

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
	var he *httpError
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
	h := httpTestPublisher(t, HTTPConfig{URL: srv.URL, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
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
