package metrics

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SessionCookie is the cookie the login sets: a value derived from the
// token (not the token itself), so that a new token ends every session.
const SessionCookie = "fieldlink_session"

// Limits of failed attempts from one client (one IPv4 address, or one IPv6
// /64): a burst, then one more every failRefill.
const (
	failBurst  = 5
	failRefill = 12 * time.Second
	// maxClients bounds the clients the limiter remembers; beyond it the
	// newcomers share one allowance.
	maxClients = 4096
)

// Auth asks the clients that are not on loopback for a token: as an
// `Authorization: Bearer` header, or as the session cookie that GET /login
// sets once it has seen the header. Clients on loopback (the gateway
// itself, an SSH tunnel) need none. Failed attempts are rate-limited per
// client; a client over its limit is answered 429 without its token being
// looked at.
type Auth struct {
	token   []byte
	session string // the cookie's value
	fails   limiter
	now     func() time.Time
}

// NewAuth returns an Auth that accepts token. An empty token admits no
// client that is not on loopback: the choice when the token cannot be
// read.
func NewAuth(token string) *Auth {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("fieldlink status session"))
	return &Auth{
		token: []byte(token), session: hex.EncodeToString(m.Sum(nil)),
		fails: limiter{clients: map[netip.Prefix]*allowance{}}, now: time.Now,
	}
}

// LoadToken reads the token of file, or, if the file does not exist,
// creates it with a new random token, readable by its owner only (0600),
// and reports created. A file readable by others is refused: its token is
// no secret.
func LoadToken(file string) (token string, created bool, err error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		token, err = writeToken(file)
		return token, err == nil, err
	}
	if err != nil {
		return "", false, fmt.Errorf("status token %s: %w", file, err)
	}
	if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return "", false, fmt.Errorf("status token %s: mode %v lets others read it; chmod 600 it, or delete it for a new token", file, fi.Mode().Perm())
	}
	token = strings.TrimSpace(string(b))
	if len(token) < 16 {
		return "", false, fmt.Errorf("status token %s: %d characters, need at least 16; delete the file for a new token", file, len(token))
	}
	return token, false, nil
}

// writeToken writes a new token to file, whole or not at all.
func writeToken(file string) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	token := base64.RawURLEncoding.EncodeToString(raw)
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*")
	if err != nil {
		return "", fmt.Errorf("status token %s: %w", file, err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	_, err = tmp.WriteString(token + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// CreateTemp makes it 0600; Link fails if a file appeared meanwhile,
		// so a token already handed out is never replaced.
		err = os.Link(tmp.Name(), file)
	}
	if err != nil {
		return "", fmt.Errorf("status token %s: %w", file, err)
	}
	return token, nil
}

// Guard returns h for clients on loopback, and for the others once they
// present the token.
func (a *Auth) Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.admit(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// admit reports whether r may go on; when not, it has answered.
func (a *Auth) admit(w http.ResponseWriter, r *http.Request) bool {
	peer, local := remote(r)
	if local {
		return true
	}
	now := a.now()
	if wait := a.fails.wait(peer, now); wait > 0 {
		tooMany(w, wait)
		return false
	}
	bearer, hasBearer := bearerToken(r)
	cookie, cerr := r.Cookie(SessionCookie)
	switch {
	case len(a.token) == 0:
	case hasBearer && subtle.ConstantTimeCompare([]byte(bearer), a.token) == 1:
		return true
	case !hasBearer && cerr == nil && subtle.ConstantTimeCompare([]byte(cookie.Value), []byte(a.session)) == 1:
		return true
	case hasBearer || cerr == nil:
		a.fails.fail(peer, now)
		if cerr == nil {
			// A cookie from an older token: drop it, or every refresh of
			// the page would count as a failed attempt.
			http.SetCookie(w, &http.Cookie{Name: SessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		}
	}
	unauthorized(w, r)
	return false
}

// login is GET /login. With the right bearer token it sets the session
// cookie and answers 204 (the login form's script sends the header, so the
// token never appears in a URL); without a header it serves the form.
func (a *Auth) login(w http.ResponseWriter, r *http.Request) {
	if _, local := remote(r); local {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if _, has := bearerToken(r); !has {
		loginPage(w, http.StatusOK)
		return
	}
	if !a.admit(w, r) {
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: a.session, Path: "/",
		MaxAge: int((30 * 24 * time.Hour).Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// remote returns the client's address as the limiter counts it, and
// whether it is on loopback. Only the connection's peer counts: no header
// a client can write.
func remote(r *http.Request) (netip.Prefix, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64 // one host of a LAN has a whole /64 to pick from
	}
	p, _ := ip.Prefix(bits)
	return p, ip.IsLoopback()
}

func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(h[7:]), true
}

func unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="fieldlink"`)
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		loginPage(w, http.StatusUnauthorized)
		return
	}
	plain(w, http.StatusUnauthorized, "token required: send Authorization: Bearer <token> (the token is in the gateway's metrics.token_file)")
}

func tooMany(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)+1))
	plain(w, http.StatusTooManyRequests, "too many failed attempts from this address; wait and try again")
}

// limiter counts failed attempts per client as a leaky bucket: each
// failure adds one, one drains every failRefill, and a client at
// failBurst waits.
type limiter struct {
	mu      sync.Mutex
	clients map[netip.Prefix]*allowance
}

type allowance struct {
	level float64
	at    time.Time
}

// drained is a's level at now.
func (a *allowance) drained(now time.Time) float64 {
	return max(a.level-float64(now.Sub(a.at))/float64(failRefill), 0)
}

// wait is how long the client must wait before its next attempt.
func (l *limiter) wait(c netip.Prefix, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.clients[l.key(c)]
	if a == nil {
		return 0
	}
	over := a.drained(now) - (failBurst - 1)
	if over <= 0 {
		return 0
	}
	return time.Duration(over * float64(failRefill))
}

// fail counts a failed attempt of the client.
func (l *limiter) fail(c netip.Prefix, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.clients[c]; !ok && len(l.clients) >= maxClients {
		l.forget(now)
	}
	k := l.key(c)
	a := l.clients[k]
	if a == nil {
		a = &allowance{}
		l.clients[k] = a
	}
	a.level, a.at = a.drained(now)+1, now
}

// key is c, or the shared key of the newcomers when the map is full.
func (l *limiter) key(c netip.Prefix) netip.Prefix {
	if _, ok := l.clients[c]; ok || len(l.clients) < maxClients {
		return c
	}
	return netip.Prefix{}
}

// forget drops the clients whose failures have drained away.
func (l *limiter) forget(now time.Time) {
	for k, a := range l.clients {
		if a.drained(now) == 0 {
			delete(l.clients, k)
		}
	}
}
