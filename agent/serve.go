package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"fieldlink/config"
	"fieldlink/fleet"
	"fieldlink/internal/sdnotify"
	"fieldlink/packet"
)

// ServeOptions are what [Serve] needs beside the site file's configuration.
type ServeOptions struct {
	// File is the site file, loaded again at every reload.
	File string
	// Profiles loads the firmware profiles a site file names.
	Profiles config.ProfileSource
	// Logger; nil discards.
	Logger *slog.Logger
	// Stdout takes every packet as a JSON line once it is safe (see
	// [Options.OnPacket]) when Print is set, and always when the site has
	// no uplink: the packets have nowhere else to go. Nil prints nothing.
	Stdout io.Writer
	Print  bool
	// Reload delivers a value for each reload asked for (SIGHUP).
	Reload <-chan os.Signal
	// Version is the gateway's version as the status page shows it (see
	// [Options.Version]); the binary gives its own.
	Version string
}

// Serve runs the daemon's life for the site file's configuration local:
// the remote configuration's last known-good bundle at startup, the
// gateway, its metrics listener and status page, systemd's readiness and
// watchdog, reloads of the site file, and the stop when ctx ends or the
// gateway fails. It returns an error when the gateway cannot start, or
// when the buffer failed (only a restart can then be trusted).
func Serve(ctx context.Context, local *config.Config, o ServeOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// With remote_config, start from the last known-good bundle, never
	// waiting for the configuration server.
	c, remote, err := fleet.Startup(local, o.Profiles)
	if err != nil {
		log.Error("remote configuration", "err", err)
	}
	opt := Options{Logger: log, Version: o.Version}
	if (o.Print || c.Uplink == nil) && o.Stdout != nil {
		opt.OnPacket = printer(o.Stdout, c.Packet.Values)
	}
	g, err := Start(c, opt)
	if err != nil {
		return err
	}
	stopMetrics := ServeMetrics(c, g.Sources(), log)
	defer stopMetrics()
	if q := g.Buffer(); q != nil {
		log.Info("gateway running", "site", c.Site.ID, "gateway", c.Gateway.ID, "devices", c.DeviceCount(),
			"upstreams", len(c.Uplink.Upstreams), "selector", c.Uplink.Selector, "buffer", c.Buffer.Path, "queued", q.Len(), "epoch", q.Epoch())
	} else {
		log.Info("gateway running without an uplink: packets go to stdout", "site", c.Site.ID, "gateway", c.Gateway.ID, "devices", c.DeviceCount())
	}
	if local.RemoteConfig != nil {
		if err := g.StartRemote(local, remote, o.Profiles); err != nil {
			_ = g.Stop()
			return err
		}
	}
	stopWatchdog := watchdog(ctx, func() bool { return g.Fatal() == nil })
	_ = sdnotify.Ready()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-g.Failed():
			break loop
		case <-o.Reload:
			g.reloadFile(o.File, o.Profiles, log)
		}
	}
	_ = sdnotify.Stopping()
	stopWatchdog()
	err = g.Stop()
	stored, failed := g.Counts()
	if q := g.Buffer(); q != nil {
		log.Info("gateway stopped", "queued", q.Len(), "buffered", stored, "not_buffered", failed)
	} else {
		log.Info("gateway stopped")
	}
	if err != nil {
		// An fsync failed: the kernel may have dropped the data; only a
		// restart (by systemd) can be trusted.
		return fmt.Errorf("buffer failed, exiting for a restart: %w", err)
	}
	return nil
}

// printer writes each packet as a JSON line to w, one at a time.
func printer(w io.Writer, values packet.ValueStyle) func(*packet.Packet) {
	var mu sync.Mutex
	buf := make([]byte, 0, 1024)
	return func(p *packet.Packet) {
		mu.Lock()
		defer mu.Unlock()
		buf = append(p.AppendJSON(buf[:0], values), '\n')
		_, _ = w.Write(buf)
	}
}

// reloadFile loads the site file again and applies it; a file with errors,
// or one the gateway refuses, leaves the running configuration in force.
func (g *Agent) reloadFile(file string, profiles config.ProfileSource, log *slog.Logger) {
	log = log.With("component", "reload", "file", file)
	_ = sdnotify.Notify("RELOADING=1")
	defer func() { _ = sdnotify.Ready() }()
	c, err := config.Load(file, profiles)
	if err != nil {
		log.Error("site file refused; the running configuration stays in force")
		for _, line := range strings.Split(err.Error(), "\n") {
			log.Error("site file error", "error", line)
		}
		g.ReloadRefused(err)
		return
	}
	for _, w := range c.Warnings {
		log.Warn("site file warning", "warning", w)
	}
	if err := g.ReloadLocal(c, profiles); err != nil {
		log.Error("site file refused; the running configuration stays in force", "err", err)
		// Agent.Reload records its own refusals; one that never
		// reached it (the remote configuration's manager refusing the
		// file) is recorded here.
		g.ReloadRefused(err)
	}
}

// watchdog feeds systemd's watchdog (WatchdogSec in the unit) while healthy
// says so; the returned function stops it and waits. A hung gateway stops
// feeding it and systemd restarts it.
func watchdog(ctx context.Context, healthy func() bool) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); sdnotify.RunWatchdog(ctx, healthy) }()
	return func() { cancel(); <-done }
}

// TuneRuntime sets the Go runtime of a process that runs the daemon
// (gateway run, before [Serve]); GOGC and GOMAXPROCS in the environment
// override it. It changes the whole process, hence not part of Serve.
func TuneRuntime() {
	// The daemon's live heap is under 1 MB; Go's default GOGC=100 lets the
	// heap grow to its 4 MB minimum goal before collecting. 25 keeps it near
	// 1 MB on a Pi Zero's 512 MB, for a CPU cost the footprint run measures
	// (scripts/footprint).
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	// One P: the daemon's work is a chain of hand-offs between goroutines
	// (poll, store, publish, ack), not parallel computation, and with more
	// Ps the runtime wakes an OS thread for many of them. At 100 pkt/s one
	// P cut the CPU per packet by a third (scripts/footprint).
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
