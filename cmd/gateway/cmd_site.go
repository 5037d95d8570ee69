package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"fieldlink/buffer"
	"fieldlink/config"
	"fieldlink/metrics"
	"fieldlink/packet"
	"fieldlink/sdnotify"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/uplink"
)

// printErr prints a config error list one per line, so each names its
// file:line: field.
func printErr(w io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(w, "%s\n", line)
	}
}

func cmdCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("check", stderr)
	file := fs.String("c", "", "site file to validate")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(*file, stderr)
	if err != nil {
		printErr(stderr, err)
		return errSilent
	}
	fmt.Fprintf(stdout, "%s: ok: %s %s, gateway %s, %d buses, %d devices, %d serial sensors\n",
		c.File, c.Site.IDField, c.Site.ID, c.Gateway.ID, len(c.Buses), c.DeviceCount()-len(c.SerialSensors), len(c.SerialSensors))
	for _, b := range c.Buses {
		ep, _ := modbus.ParseURL(b.URL)
		fmt.Fprintf(stdout, "bus %s: %s (%s), timeout %v\n", b.Name, b.URL, ep.LineSettings(), b.Timeout)
		for _, d := range b.Devices {
			maxGap := -1
			if b.MaxGap != nil {
				maxGap = *b.MaxGap
			}
			reqs, err := sensors.PlanDevice(c.Profiles[d.Profile], maxGap, busCost(ep, *b.Turnaround))
			if err != nil {
				return err
			}
			parts := make([]string, len(reqs))
			for i, r := range reqs {
				parts[i] = r.String()
			}
			fmt.Fprintf(stdout, "  %s: slave %d, %s, every %v, %d registers in %d requests (%s)\n",
				d.Name, d.Slave, d.Profile, d.Interval, len(c.Profiles[d.Profile].Registers), len(reqs), strings.Join(parts, ", "))
		}
	}
	for _, s := range c.SerialSensors {
		fmt.Fprintf(stdout, "serial sensor %s: %s, %s\n", s.Name, s.URL, s.Profile)
	}
	return nil
}

// siteFlags declares the flags of the commands that work on a site file.
func siteFlags(name string, stderr io.Writer, level string) (file, logLevel *string, parseArgs func([]string) error) {
	f := flags(name, stderr)
	file = f.String("c", "", "site file")
	logLevel = f.String("log-level", level, "log level: debug, info, warn, error")
	return file, logLevel, func(args []string) error { return parse(f, args) }
}

// startSite makes the logger, loads and checks the site file (printing its
// errors) and opens its buses.
func startSite(file, level, format string, stderr io.Writer) (*config.Config, *site, *slog.Logger, error) {
	log, err := newLoggerFormat(stderr, level, format)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := loadConfig(file, stderr)
	if err != nil {
		printErr(stderr, err)
		return nil, nil, nil, errSilent
	}
	s, err := openSite(c, log)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, s, log, nil
}

func cmdPoll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	file, level, parseArgs := siteFlags("poll", stderr, "warn")
	if err := parseArgs(args); err != nil {
		return err
	}
	c, s, _, err := startSite(*file, *level, "auto", stderr)
	if err != nil {
		return err
	}
	defer s.close()
	failed := 0
	buf := make([]byte, 0, 1024)
	s.pollOnce(ctx, func(p *packet.Packet, err error) {
		if err != nil {
			failed++
			fmt.Fprintf(stderr, "error: %v\n", err)
			return
		}
		buf = append(p.AppendJSON(buf[:0], s.enc), '\n')
		_, _ = stdout.Write(buf)
	})
	if failed > 0 {
		fmt.Fprintf(stderr, "%d of %d devices failed\n", failed, c.DeviceCount())
		return errSilent
	}
	return ctx.Err()
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := flags("run", stderr)
	file := f.String("c", "", "site file")
	level := f.String("log-level", "info", "log level: debug, info, warn, error")
	printAll := f.Bool("print", false, "also print every packet as a JSON line on stdout (always on without an uplink)")
	format := f.String("log-format", "auto", "auto (JSON under systemd, text on a terminal), text or json")
	if err := parse(f, args); err != nil {
		return err
	}
	// The daemon's live heap is under 1 MB; Go's default GOGC=100 lets the
	// heap grow to its 4 MB minimum goal before collecting. 25 keeps it near
	// 1 MB on a Pi Zero's 512 MB, for a CPU cost the footprint run measures
	// (scripts/footprint). GOGC in the environment overrides it.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	// SIGHUP reloads the site file; caught from the start so that an early
	// one cannot kill the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	c, s, log, err := startSite(*file, *level, *format, stderr)
	if err != nil {
		return err
	}
	d := &daemon{file: *file, log: log, cfg: c, site: s}
	defer func() { d.site.close() }()
	var mu sync.Mutex
	buf := make([]byte, 0, 1024)
	show := func(p *packet.Packet) {
		mu.Lock()
		defer mu.Unlock()
		s, _ := d.current() // a reload may swap the site meanwhile
		buf = append(p.AppendJSON(buf[:0], s.enc), '\n')
		_, _ = stdout.Write(buf)
	}
	src := metrics.Sources{Devices: d.status, Buses: d.busSamples, Modbus: d.modbusStats,
		Ready: func() (bool, string) { return metrics.DevicesAnswering(d.status()) }}
	// serve polls until pollCtx ends, reloading on SIGHUP.
	serve := func(pollCtx context.Context) {
		d.startSouth(pollCtx)
		for {
			select {
			case <-pollCtx.Done():
				d.stopSouth()
				return
			case <-hup:
				d.reload(pollCtx, ctx)
			}
		}
	}
	if c.Uplink == nil {
		stopMetrics := serveMetrics(ctx, c, src, log)
		defer stopMetrics()
		log.Info("gateway running without an uplink: packets go to stdout", "site", c.Site.ID, "gateway", c.Gateway.ID, "devices", c.DeviceCount())
		defer watchdog(ctx, nil)()
		d.emit = show
		_ = sdnotify.Ready()
		serve(ctx)
		_ = sdnotify.Stopping()
		log.Info("gateway stopped")
		return nil
	}

	q, err := openBuffer(c, s.enc, log)
	if err != nil {
		return err
	}
	defer q.Close()
	d.q = q
	if err := d.startNorth(ctx, c); err != nil {
		return err
	}
	log.Info("gateway running", "site", c.Site.ID, "gateway", c.Gateway.ID, "devices", c.DeviceCount(),
		"upstreams", len(c.Uplink.Upstreams), "selector", c.Uplink.Selector, "buffer", c.Buffer.Path, "queued", q.Len(), "epoch", q.Epoch())
	pollCtx, stopPolling := context.WithCancel(ctx)
	in := newSink(q, log, stopPolling)
	d.emit = in.Put
	src.Buffer = func() (buffer.Stats, bool) { return q.Stats(), true }
	src.Delivery = func() (uplink.DeliveryStats, bool) {
		if _, n := d.current(); n != nil {
			return n.delivery.Stats(), true
		}
		return uplink.DeliveryStats{}, false
	}
	src.Upstreams = func() []selector.Stats {
		if _, n := d.current(); n != nil {
			return n.table.Snapshot()
		}
		return nil
	}
	src.Selector = func() string {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.cfg.Uplink.Selector
	}
	src.SelectorFallbacks = func() uint64 {
		if _, n := d.current(); n != nil {
			if f, ok := n.strat.(interface{ Fallbacks() uint64 }); ok {
				return f.Fallbacks()
			}
		}
		return 0
	}
	src.Ready = func() (bool, string) {
		if err := in.Fatal(); err != nil {
			return false, "buffer failed: " + err.Error()
		}
		return metrics.DevicesAnswering(d.status())
	}
	stopMetrics := serveMetrics(ctx, c, src, log)
	defer stopMetrics()
	if *printAll {
		in.onStored = show
	}
	go in.Run()
	defer watchdog(ctx, func() bool { return in.Fatal() == nil })()
	_ = sdnotify.Ready()
	serve(pollCtx)
	_ = sdnotify.Stopping()
	stopPolling()
	in.Close()
	d.mu.Lock()
	d.stopNorth()
	d.mu.Unlock()
	log.Info("gateway stopped", "queued", q.Len(), "buffered", in.stored.Load(), "not_buffered", in.failed.Load())
	if err := in.Fatal(); err != nil {
		// An fsync failed: the kernel may have dropped the data; only a
		// restart (by systemd) can be trusted.
		return fmt.Errorf("buffer failed, exiting for a restart: %w", err)
	}
	return nil
}

// watchdog feeds systemd's watchdog (WatchdogSec in the unit) while healthy
// says so (nil: always); the returned function stops it and waits. A hung
// gateway stops feeding it and systemd restarts it.
func watchdog(ctx context.Context, healthy func() bool) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); sdnotify.RunWatchdog(ctx, healthy) }()
	return func() { cancel(); <-done }
}

// serveMetrics serves /metrics, /healthz and /readyz until ctx ends or the
// returned function is called; that function stops the server and waits
// for it. A listener that cannot start is logged, not fatal: the gateway's
// job is the data.
func serveMetrics(ctx context.Context, c *config.Config, src metrics.Sources, log *slog.Logger) func() {
	if c.Metrics.Listen == "off" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l := log.With("component", "metrics")
		if err := metrics.Serve(ctx, c.Metrics.Listen, metrics.Handler(src), c.Metrics.AllowRemote, l); err != nil {
			l.Error("metrics and health endpoints not available", "listen", c.Metrics.Listen, "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

func cmdProfiles(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("profiles", stderr)
	file := fs.String("c", "", "site file whose profiles_dir to include")
	if err := parse(fs, args); err != nil {
		return err
	}
	set, err := loadProfiles("")
	if *file != "" {
		var c *config.Config
		c, err = loadConfig(*file, stderr)
		if c != nil {
			set = c.Profiles
		}
	}
	if err != nil {
		printErr(stderr, err)
		return errSilent
	}
	for _, n := range set.Names() {
		p := set[n]
		kind := fmt.Sprintf("%d registers", len(p.Registers))
		if p.IsLine() {
			kind = fmt.Sprintf("line, %d fields", len(p.Line.Fields))
		}
		fmt.Fprintf(stdout, "%-28s %-8s %-14s %s %s\n", n, p.DataType, kind, p.Manufacturer, p.Model)
	}
	return nil
}
