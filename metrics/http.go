package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotLoopback means a listen address is not a loopback address and
// remote access was not allowed.
var ErrNotLoopback = errors.New("metrics: listen address is not loopback")

// shutdownGrace bounds how long Serve waits for scrapes in progress when
// its context ends.
const shutdownGrace = 5 * time.Second

// scrapeErrors counts the scrapes that left a series out.
var scrapeErrors atomic.Uint64

var scrapeErrorsDesc = &Desc{name: "fieldlink_metrics_scrape_errors_total",
	help: "Scrapes that left out a series they could not write (a label value not valid UTF-8).", typ: counterType}

// Handler returns the metrics and health endpoints:
//
//   - /metrics: the families of cs, in order, then the Go runtime and
//     process figures, in the text exposition format. A series that cannot
//     be written is left out (and counted), not the whole scrape.
//   - /healthz: 200 "ok" while the process serves HTTP at all.
//   - /readyz: 200 "ready" (see [HandlerOptions.Ready]).
//
// Every method but GET and HEAD is answered 405: nothing served changes
// anything.
func Handler(cs ...Collector) http.Handler { return NewHandler(cs, HandlerOptions{}) }

// HandlerOptions add readiness, pages and a token to [Handler]'s endpoints.
type HandlerOptions struct {
	// Ready reports whether the gateway is ready, and why not when it is
	// not: /readyz answers 200 "ready", or 503 with the reason. Nil means
	// always ready.
	Ready func() (ready bool, why string)
	// Pages are more routes, by [http.ServeMux] pattern ("GET /{$}"): the
	// status page.
	Pages map[string]http.Handler
	// Auth, if set, asks the clients that are not on loopback for its token
	// on Pages (and serves its login on /login), and on /metrics too with
	// ScrapeToken. /healthz and /readyz stay open: they say no more than
	// whether the gateway works.
	Auth        *Auth
	ScrapeToken bool
}

// NewHandler is [Handler] with opt's readiness, pages and token.
func NewHandler(cs []Collector, opt HandlerOptions) http.Handler {
	guard := func(h http.Handler) http.Handler { return h }
	if opt.Auth != nil {
		guard = opt.Auth.Guard
	}
	cs = slices.Clone(cs)
	var mu sync.Mutex // one scrape at a time: each reads every source
	mux := http.NewServeMux()
	scrape := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var buf bytes.Buffer
		err := Write(&buf, time.Now(), cs...)
		if err != nil {
			scrapeErrors.Add(1)
		}
		rt := newScrape(time.Time{})
		collectRuntime(rt)
		rt.add(scrapeErrorsDesc, sample{value: float64(scrapeErrors.Load())})
		_ = rt.write(&buf, runtimeFamilies)
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	})
	if opt.ScrapeToken {
		mux.Handle("GET /metrics", guard(scrape))
	} else {
		mux.Handle("GET /metrics", scrape)
	}
	for pattern, h := range opt.Pages {
		mux.Handle(pattern, guard(h))
	}
	if opt.Auth != nil {
		mux.HandleFunc("GET /login", opt.Auth.login)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		plain(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if opt.Ready != nil {
			if ok, why := opt.Ready(); !ok {
				if why == "" {
					why = "not ready"
				}
				plain(w, http.StatusServiceUnavailable, "not ready: "+why)
				return
			}
		}
		plain(w, http.StatusOK, "ready")
	})
	return readOnly(mux)
}

// readOnly answers 405 to every method but GET and HEAD, whatever the
// path, before any page or token is looked at.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			plain(w, http.StatusMethodNotAllowed, "read-only: only GET and HEAD are served")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func plain(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, body)
}

// Serve serves h on listen until ctx ends, then shuts down, giving scrapes
// in progress a few seconds, and returns nil. It returns an error at once
// when it cannot listen, and refuses (with [ErrNotLoopback]) any address
// that is not loopback, an empty host (":9273") included, unless
// allowRemote. A host name is resolved by the listen call and the address
// actually bound is checked. A nil log discards.
func Serve(ctx context.Context, listen string, h http.Handler, allowRemote bool, log *slog.Logger) error {
	ln, err := Listen(listen, allowRemote)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, h, log)
}

// Listen listens on addr as [Serve] does, refusing a non-loopback address
// unless allowRemote; the caller learns the port bound (for ":0") before
// it serves with [ServeListener].
func Listen(addr string, allowRemote bool) (net.Listener, error) { return listenTCP(addr, allowRemote) }

// ServeListener serves h on ln as [Serve] does, and closes ln.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	addr := ln.Addr().String()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("metrics listening", "addr", addr)
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		_ = srv.Close()
	}
	<-errc // http.ErrServerClosed
	if err != nil {
		return fmt.Errorf("metrics: shut down %s: %w", addr, err)
	}
	log.Info("metrics stopped", "addr", addr)
	return nil
}

// listenTCP listens on addr, refusing a non-loopback address unless
// allowRemote: IP literals and an empty host before binding, host names
// by the address they bound.
func listenTCP(addr string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen address %q: %w", addr, err)
	}
	if !allowRemote {
		switch err := LoopbackHost(host); {
		case errors.Is(err, ErrEveryInterface):
			return nil, fmt.Errorf("%w: %q listens on every interface; name a loopback address (127.0.0.1 or ::1), or allow remote access", ErrNotLoopback, addr)
		case err != nil:
			return nil, fmt.Errorf("%w: %q; name a loopback address (127.0.0.1 or ::1), or allow remote access", ErrNotLoopback, addr)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if !allowRemote {
		if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			_ = ln.Close()
			return nil, fmt.Errorf("%w: %q bound %s; name a loopback address (127.0.0.1 or ::1), or allow remote access", ErrNotLoopback, addr, ln.Addr())
		}
	}
	return ln, nil
}
