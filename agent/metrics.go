package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"fieldlink/buffer/cardstore"
	"fieldlink/config"
	"fieldlink/downlink"
	"fieldlink/exception"
	"fieldlink/fleet"
	"fieldlink/metrics"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/status"
	"fieldlink/uplink"
)

// Retries of a metrics listener that could not start: its port may be
// held by a program that lets it go (the previous gateway still
// stopping, a technician's tool).
const (
	metricsRetryFirst = time.Second
	metricsRetryMax   = 30 * time.Second
)

// ServeMetrics serves /metrics, /healthz, /readyz and the status page from
// src on c's metrics listener until the returned function is called; that
// function stops the server and waits for it. A listener that cannot start
// is logged, not fatal: the gateway's job is the data. It is tried again,
// 1 s doubling to 30 s, unless its address can never be served (not
// loopback without allow_remote).
func ServeMetrics(c *config.Config, src status.Sources, log *slog.Logger) (stop func()) {
	if c.Metrics.Listen == "off" {
		return func() {}
	}
	_, stop, err := StartMetrics(c, src, log)
	if err == nil {
		return stop
	}
	l := log.With("component", "metrics", "listen", c.Metrics.Listen)
	if errors.Is(err, metrics.ErrNotLoopback) {
		l.Error("metrics, health and status page not available", "err", err)
		return func() {}
	}
	l.Error("metrics, health and status page not available; trying again", "err", err, "retry_in", metricsRetryFirst)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for wait := metricsRetryFirst; ; wait = min(2*wait, metricsRetryMax) {
			t := time.NewTimer(wait)
			select {
			case <-quit:
				t.Stop()
				return
			case <-t.C:
			}
			_, stop, err := StartMetrics(c, src, log)
			if err == nil {
				l.Info("metrics, health and status page available again")
				<-quit
				stop()
				return
			}
			l.Debug("metrics listener still not available", "err", err, "retry_in", min(2*wait, metricsRetryMax))
		}
	}()
	return func() { close(quit); <-done }
}

// StartMetrics is ServeMetrics that returns the address it listens on, or
// why it cannot listen.
func StartMetrics(c *config.Config, src status.Sources, log *slog.Logger) (addr string, stop func(), err error) {
	l := log.With("component", "metrics")
	ln, err := metrics.Listen(c.Metrics.Listen, c.Metrics.AllowRemote)
	if err != nil {
		return "", nil, err
	}
	h := MetricsHandler(c, src, l)
	addr = ln.Addr().String()
	l.Info("status page", "url", "http://"+addr+"/")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := metrics.ServeListener(ctx, ln, h, l); err != nil {
			l.Error("metrics listener failed", "addr", addr, "err", err)
		}
	}()
	return addr, func() { cancel(); <-done }, nil
}

// MetricsHandler is the metrics listener's handler for c: the metrics and
// health endpoints and the status page, with, when the listener is open to
// the LAN, the token of c's token file, created at the first start. A
// token that cannot be read leaves the page to loopback clients.
func MetricsHandler(c *config.Config, src status.Sources, log *slog.Logger) http.Handler {
	opt := metrics.HandlerOptions{Pages: status.New(src, status.Options{}).Pages(), ScrapeToken: c.Metrics.ScrapeToken}
	if c.Metrics.AllowRemote {
		file := c.Metrics.TokenFile
		tok, created, err := metrics.LoadToken(file)
		switch {
		case err != nil:
			log.Error("status page token unreadable: the page is served on loopback only", "err", err)
		case created:
			// Where it is, never the token: whoever reads the journal
			// must not get it (read the file as its owner, or root).
			log.Warn("status page token created; clients that are not on loopback must present the token in this file", "file", file)
		default:
			log.Info("status page asks clients that are not on loopback for the token", "file", file)
		}
		opt.Auth = metrics.NewAuth(tok)
	}
	opt.Ready = src.Ready
	return metrics.NewHandler(collectors(src), opt)
}

// collectors are the gateway's metrics over src: each component's
// collector, in the order /metrics writes their families. A nil source
// leaves its collector's families out.
func collectors(src status.Sources) []metrics.Collector {
	return []metrics.Collector{
		sensors.DeviceMetrics{Devices: src.Devices, Buses: src.Buses},
		modbus.Metrics{Stats: src.Modbus},
		cardstore.Metrics{Stats: src.Buffer, State: src.Durability},
		uplink.Metrics{Delivery: src.Delivery},
		selector.Metrics{Upstreams: src.Upstreams, Strategy: src.Selector, Fallbacks: src.SelectorFallbacks},
		downlink.Metrics{Commands: src.Commands},
		fleet.Metrics{Report: src.Remote},
		sensors.ReadingMetrics{Readings: metricsReadings(src)},
		exception.Metrics{HeldBack: src.HeldBack},
	}
}

// metricsReadings is src's Readings when /metrics shows them, else nil.
func metricsReadings(src status.Sources) func(time.Time) []sensors.Reading {
	if !src.MetricsReadings {
		return nil
	}
	return src.Readings
}

// statusState is what the status page knows of the gateway beyond the
// snapshots: when it started, the site file in force, the last reload.
type statusState struct {
	started time.Time

	mu     sync.Mutex
	hash   string // SHA-256 of the site file in force, as loaded; "" if unreadable
	reload *status.ReloadResult
}

// loaded records c as the site file in force.
func (st *statusState) loaded(c *config.Config) {
	h := fileHash(c.File)
	st.mu.Lock()
	st.hash = h
	st.mu.Unlock()
}

// reloaded records a reload's outcome; c is the site file in force after
// it.
func (st *statusState) reloaded(c *config.Config, err error) {
	r := &status.ReloadResult{At: time.Now()}
	if err != nil {
		r.Err = err.Error()
	} else {
		st.loaded(c)
	}
	st.mu.Lock()
	st.reload = r
	st.mu.Unlock()
}

// ReloadRefused records a reload refused before the agent saw the new
// configuration (a site file that does not load: its errors are err's
// lines), so that the status page shows it as it shows a refusal of
// [Agent.Reload]. The page keeps the first [ReloadErrorLines] errors and
// says how many more there are; the log has them all.
func (g *Agent) ReloadRefused(err error) {
	if err == nil {
		return
	}
	r := &status.ReloadResult{At: time.Now(), Err: firstLines(err.Error(), ReloadErrorLines)}
	g.status.mu.Lock()
	g.status.reload = r
	g.status.mu.Unlock()
}

// ReloadErrorLines is how many of a refused site file's errors the status
// page shows.
const ReloadErrorLines = 3

// firstLines is the first n lines of s, joined by "; ", and how many more
// there are.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "; ")
	}
	return strings.Join(lines[:n], "; ") + fmt.Sprintf("; and %d more (see the log)", len(lines)-n)
}

func fileHash(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// statusSources adds the status page's own sources to src.
func (g *Agent) statusSources(src *status.Sources) {
	src.Identity = g.identity
	if g.q != nil {
		dir := filepath.Dir(g.Config().Buffer.Path)
		src.Disk = func() (status.DiskSpace, bool) { return status.Disk(dir) }
	}
	// Downlink stays nil until the gateway has one: then it reports
	// whether it is enabled and its latest commands.
}

// identity is who the gateway is, and whether its site file on disk is
// the one in force.
func (g *Agent) identity() status.GatewayIdentity {
	c := g.Config()
	st := &g.status
	st.mu.Lock()
	hash := st.hash
	var reload *status.ReloadResult
	if st.reload != nil {
		r := *st.reload
		reload = &r
	}
	st.mu.Unlock()
	si := status.GatewayIdentity{
		SiteID: c.Site.ID, GatewayID: c.Gateway.ID, Location: c.Location, Version: g.opt.Version,
		Started: st.started, ConfigFile: c.File, ConfigSHA256: hash, LastReload: reload,
	}
	si.Remote = g.remoteState()
	if hash != "" {
		if b, err := os.ReadFile(c.File); err != nil {
			si.OnDiskError = err.Error()
		} else {
			h := sha256.Sum256(b)
			si.OnDiskSHA256 = hex.EncodeToString(h[:])
		}
	}
	return si
}
