package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testToken = "tok-0123456789abcdef-0123456789"

// guarded is a handler with a page, as the agent builds it, behind a's
// token; scrapeToken guards /metrics too.
func guarded(a *Auth, scrapeToken bool) http.Handler {
	page := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the page") })
	return NewHandler(nil, HandlerOptions{
		Pages: map[string]http.Handler{"GET /{$}": page, "GET /status.json": page},
		Auth:  a, ScrapeToken: scrapeToken,
	})
}

// do serves one request from remote (host:port) and returns the response.
func do(h http.Handler, method, path, remote string, header http.Header) *http.Response {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

const lan = "192.0.2.7:51000"

func TestReadOnly(t *testing.T) {
	h := guarded(NewAuth(testToken), true)
	for _, path := range []string{"/", "/status.json", "/metrics", "/healthz", "/readyz", "/login", "/nope"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, "PROPFIND"} {
			for _, remote := range []string{"127.0.0.1:4000", lan} {
				resp := do(h, m, path, remote, bearer(testToken))
				if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
					t.Errorf("%s %s from %s: %d (Allow %q), want 405", m, path, remote, resp.StatusCode, resp.Header.Get("Allow"))
				}
			}
		}
	}
	if resp := do(h, http.MethodHead, "/", "127.0.0.1:4000", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /: %d", resp.StatusCode)
	}
}

func TestTokenFromRemoteClientsOnly(t *testing.T) {
	for _, scrapeToken := range []bool{false, true} {
		h := guarded(NewAuth(testToken), scrapeToken)
		for _, tc := range []struct {
			path, remote string
			header       http.Header
			want         int
		}{
			{"/", "127.0.0.1:4000", nil, 200},
			{"/status.json", "[::1]:4000", nil, 200},
			{"/status.json", "[::ffff:127.0.0.1]:4000", nil, 200},
			{"/status.json", "127.8.9.10:4000", nil, 200},
			{"/", lan, nil, 401},
			{"/status.json", lan, nil, 401},
			{"/status.json", "[2001:db8::5]:4000", nil, 401},
			{"/status.json", "10.0.0.1:4000", http.Header{"X-Forwarded-For": {"127.0.0.1"}, "X-Real-Ip": {"127.0.0.1"}}, 401},
			{"/status.json", lan, bearer(testToken), 200},
			{"/status.json", lan, http.Header{"Authorization": {"bearer  " + testToken + " "}}, 200},
			{"/status.json", lan, http.Header{"Authorization": {"Basic " + testToken}}, 401},
			{"/healthz", lan, nil, 200},
			{"/readyz", lan, nil, 200},
			{"/metrics", lan, nil, map[bool]int{false: 200, true: 401}[scrapeToken]},
			{"/metrics", lan, bearer(testToken), 200},
			{"/metrics", "127.0.0.1:4000", nil, 200},
		} {
			resp := do(h, http.MethodGet, tc.path, tc.remote, tc.header)
			if resp.StatusCode != tc.want {
				t.Errorf("scrape_token %v: GET %s from %s with %v: %d, want %d", scrapeToken, tc.path, tc.remote, tc.header, resp.StatusCode, tc.want)
			}
			if resp.StatusCode == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("GET %s from %s: 401 without WWW-Authenticate: Bearer", tc.path, tc.remote)
			}
		}
	}
}

// A browser without the cookie gets the login form; the form's GET /login
// with the token sets an HttpOnly, SameSite=Strict cookie that is not the
// token, and the cookie then opens the page.
func TestLoginCookie(t *testing.T) {
	a := NewAuth(testToken)
	h := guarded(a, false)

	resp := do(h, http.MethodGet, "/", lan, http.Header{"Accept": {"text/html,application/xhtml+xml"}})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 401 || !strings.Contains(string(body), "<form") || strings.Contains(string(body), testToken) {
		t.Fatalf("GET / from a browser without a cookie: %d\n%s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'sha256-") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("login form's CSP %q", csp)
	}
	if resp := do(h, http.MethodGet, "/login", lan, nil); resp.StatusCode != 200 {
		t.Errorf("GET /login without a token: %d, want the form", resp.StatusCode)
	}
	if resp := do(h, http.MethodGet, "/login", lan, bearer("wrong-token-wrong-token")); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Errorf("GET /login with a wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	resp = do(h, http.MethodGet, "/login", lan, bearer(testToken))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET /login with the token: %d", resp.StatusCode)
	}
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == SessionCookie {
			c = k
		}
	}
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge <= 0 {
		t.Fatalf("session cookie %+v", c)
	}
	if c.Value == testToken || strings.Contains(c.Value, testToken) {
		t.Fatal("the cookie carries the token itself")
	}
	withCookie := http.Header{"Cookie": {SessionCookie + "=" + c.Value}}
	if resp := do(h, http.MethodGet, "/status.json", lan, withCookie); resp.StatusCode != 200 {
		t.Errorf("GET /status.json with the cookie: %d", resp.StatusCode)
	}
	// The same cookie is worthless once the token changed.
	resp = do(guarded(NewAuth(testToken+"-new"), false), http.MethodGet, "/status.json", lan, withCookie)
	if resp.StatusCode != 401 {
		t.Errorf("an old session cookie after a new token: %d, want 401", resp.StatusCode)
	}
	cleared := false
	for _, k := range resp.Cookies() {
		cleared = cleared || (k.Name == SessionCookie && k.MaxAge < 0)
	}
	if !cleared {
		t.Error("an old session cookie is not cleared")
	}
	if resp := do(h, http.MethodGet, "/login", "127.0.0.1:1", nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET /login on loopback: %d, want a redirect to the page", resp.StatusCode)
	}
}

// Five wrong tokens from one client, and its next attempt is refused with
// 429 unseen, the right token included, while another client is not
// affected; one attempt comes back per refill period. An IPv6 client
// counts by its /64.
func TestFailedAttemptsRateLimited(t *testing.T) {
	a := NewAuth(testToken)
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return now }
	h := guarded(a, false)
	get := func(remote, tok string) int {
		return do(h, http.MethodGet, "/status.json", remote, bearer(tok)).StatusCode
	}
	for i := range failBurst {
		if code := get(lan, "wrong-token-wrong-token"); code != 401 {
			t.Fatalf("wrong attempt %d: %d, want 401", i+1, code)
		}
	}
	resp := do(h, http.MethodGet, "/status.json", lan, bearer(testToken))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the right token after %d wrong ones: %d (Retry-After %q), want 429", failBurst, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code := get("192.0.2.8:1", testToken); code != 200 {
		t.Errorf("another client: %d, want 200", code)
	}
	if code := get("127.0.0.1:1", ""); code != 200 {
		t.Errorf("loopback while a LAN client is limited: %d", code)
	}
	now = now.Add(failRefill)
	if code := get(lan, "wrong-token-wrong-token"); code != 401 {
		t.Errorf("one refill period later, an attempt: %d, want 401", code)
	}
	if code := get(lan, testToken); code != http.StatusTooManyRequests {
		t.Errorf("right after it: %d, want 429", code)
	}
	now = now.Add(failRefill)
	if code := get(lan, testToken); code != 200 {
		t.Errorf("another refill period later, the right token: %d, want 200", code)
	}

	for i := range failBurst {
		get("[2001:db8:1:2::"+string(rune('a'+i))+"]:1", "wrong-token-wrong-token")
	}
	if code := get("[2001:db8:1:2::ff]:1", testToken); code != http.StatusTooManyRequests {
		t.Errorf("another address of the same /64: %d, want 429", code)
	}
	if code := get("[2001:db8:1:3::1]:1", testToken); code != 200 {
		t.Errorf("another /64: %d, want 200", code)
	}
}

// The limiter remembers a bounded number of clients; newcomers beyond it
// share one allowance, and clients whose failures drained are forgotten to
// make room.
func TestLimiterBounded(t *testing.T) {
	l := limiter{clients: map[netip.Prefix]*allowance{}}
	now := time.Unix(1_800_000_000, 0)
	client := func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
	}
	for i := range maxClients {
		l.fail(client(i), now)
	}
	for i := range failBurst {
		l.fail(client(maxClients+i), now)
	}
	if n := len(l.clients); n > maxClients+1 {
		t.Fatalf("%d clients remembered, bound %d", n, maxClients+1)
	}
	if l.wait(client(maxClients+failBurst), now) == 0 {
		t.Error("a newcomer beyond the bound does not share the newcomers' spent allowance")
	}
	if l.wait(client(0), now) != 0 {
		t.Error("a client with one failure waits")
	}
	later := now.Add(failBurst * failRefill)
	l.fail(client(1<<20), later)
	if n := len(l.clients); n != 1 {
		t.Errorf("%d clients remembered after every allowance drained and a newcomer failed, want 1", n)
	}
	if l.wait(client(maxClients+failBurst), later) != 0 {
		t.Error("a drained client still waits")
	}
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "status-token")
	tok, created, err := LoadToken(file)
	if err != nil || !created || len(tok) < 40 {
		t.Fatalf("first LoadToken = %q, %v, %v", tok, created, err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v; want mode 0600", fi, err)
	}
	again, created, err := LoadToken(file)
	if err != nil || created || again != tok {
		t.Fatalf("second LoadToken = %q, %v, %v; want the same token, not created", again, created, err)
	}
	other, _, err := LoadToken(filepath.Join(dir, "other"))
	if err != nil || other == tok {
		t.Fatalf("another file's token %q (%v) equals the first", other, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("%d files in the directory, want the two tokens and no temporary file", len(ents))
	}

	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadToken(file); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a token file others can read: %v", err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadToken(short); err == nil {
		t.Error("a 3-character token accepted")
	}
	if _, _, err := LoadToken(filepath.Join(dir, "no-such-dir", "tok")); err == nil || !strings.Contains(err.Error(), "no-such-dir") {
		t.Errorf("a token file in a missing directory: %v", err)
	}
}

// An Auth without a token (the token file could not be read) admits no
// client that is not on loopback, not even one that sends an empty token.
func TestEmptyTokenAdmitsNoRemoteClient(t *testing.T) {
	h := guarded(NewAuth(""), true)
	for _, hd := range []http.Header{nil, bearer(""), {"Authorization": {"Bearer"}}, {"Cookie": {SessionCookie + "="}}} {
		if code := do(h, http.MethodGet, "/status.json", lan, hd).StatusCode; code != 401 {
			t.Errorf("empty token, header %v: %d, want 401", hd, code)
		}
	}
	if code := do(h, http.MethodGet, "/status.json", "127.0.0.1:1", nil).StatusCode; code != 200 {
		t.Errorf("empty token, loopback: %d, want 200", code)
	}
}
