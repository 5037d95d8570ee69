package status

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"fieldlink/internal/kclock"
)

// Server builds the status page and /status.json from the gateway's
// snapshot functions, once per view: nothing runs between views, and
// nothing on the polling or delivery paths.
type Server struct {
	src   Sources
	now   func() time.Time
	clock func(now time.Time) Clock

	mu     sync.Mutex // one view at a time: each reads every source
	window window
}

// Options tune a [Server]; the zero value is the production setting.
type Options struct {
	// Now is the clock of the snapshots; nil means time.Now.
	Now func() time.Time
	// Clock says whether the system clock can be trusted at now; nil reads
	// the kernel's NTP state (see [Clock]).
	Clock func(now time.Time) Clock
}

// New returns a server over src.
func New(src Sources, opt Options) *Server {
	s := &Server{src: src, now: opt.Now, clock: opt.Clock}
	if s.now == nil {
		s.now = time.Now
	}
	if s.clock == nil {
		s.clock = SystemClock
	}
	return s
}

// Snapshot reads every source once.
func (s *Server) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.build(s.now())
}

// Pages are the server's routes, for [metrics.HandlerOptions.Pages]:
//
//   - / the page; ?errors=1 shows only what is not well, ?raw=1 the
//     registers in hex, ?fragment=1 only the page's body, for its script
//     to refresh it;
//   - /status.json the same snapshot as one JSON document.
func (s *Server) Pages() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /{$}":         http.HandlerFunc(s.serveHTML),
		"GET /status.json": http.HandlerFunc(s.serveJSON),
	}
}

func (s *Server) serveHTML(w http.ResponseWriter, r *http.Request) {
	snap := s.Snapshot()
	q := r.URL.Query()
	v := view{errorsOnly: q.Get("errors") == "1", raw: q.Get("raw") == "1"}
	var b []byte
	if q.Get("fragment") == "1" {
		b = renderMain(snap)
	} else {
		b = renderPage(snap, v)
		w.Header().Set("Content-Security-Policy", pageCSP)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	send(w, r, b)
}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	b, err := json.MarshalIndent(s.Snapshot(), "", " ")
	if err != nil {
		http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	send(w, r, append(b, '\n'))
}

// send writes b, gzipped when the client takes it and it is worth it: a
// phone on a weak link in a barn.
func send(w http.ResponseWriter, r *http.Request, b []byte) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Add("Vary", "Accept-Encoding")
	if len(b) > 1024 && acceptsGzip(r) {
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
		_, _ = zw.Write(b)
		if zw.Close() == nil {
			h.Set("Content-Encoding", "gzip")
			b = z.Bytes()
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}

func acceptsGzip(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept-Encoding"), ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// clockFloor is a date every gateway's clock is past once set: this
// code's own. A Raspberry Pi without a real-time clock boots at the date it
// last saved, or at 1970.
var clockFloor = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// SystemClock reads the kernel's NTP state, and checks the clock against a
// date it must be past.
func SystemClock(now time.Time) Clock {
	c := Clock{Now: now.UTC()}
	if synced, maxErr, ok := kclock.State(); ok {
		c.Synchronised, c.MaxErrorSecond = &synced, ptr(maxErr.Seconds())
		if !synced {
			c.Problem = text("the system clock is not synchronised (no NTP server reached since boot): packets may carry a wrong date")
		}
	}
	if now.Before(clockFloor) {
		c.Problem = text("the system clock says " + now.UTC().Format("2006-01-02 15:04 MST") + ", a date before this gateway's software was written: " +
			"it was never set, and packets carry a wrong date")
	}
	return c
}
