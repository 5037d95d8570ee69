package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"fieldlink/agent"
	"fieldlink/commission"
	"fieldlink/config"
	"fieldlink/internal/words"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
)

// printErr prints a config error list one per line, so each names its
// file:line: field.
func printErr(w io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(w, "%s\n", line)
	}
}

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("check", stderr)
	file := fs.String("c", "", "site file to validate")
	live := fs.Bool("live", false, "then check what the file cannot say: serial ports there, free and open to the service's user, the buffer's directory, each upstream's connect, TLS and credentials, one read of each slave; a table of ok / FAIL and why, exit 1 on a FAIL")
	probe := fs.Duration("timeout", commission.DefaultProbe, "-live: bound on each probe (a connect, a handshake, a read)")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(*file, stderr)
	if err != nil {
		printErr(stderr, err)
		return errSilent
	}
	fmt.Fprintf(stdout, "%s: ok: %s %s, gateway %s, %s, %s, %s\n",
		c.File, c.Site.IDField, c.Site.ID, c.Gateway.ID, words.Count(len(c.Buses), "bus"), words.Count(c.DeviceCount()-len(c.SerialSensors), "device"), words.Count(len(c.SerialSensors), "serial sensor"))
	for _, b := range c.Buses {
		ep, _ := modbus.ParseURL(b.URL)
		fmt.Fprintf(stdout, "bus %s: %s (%s), timeout %v\n", b.Name, b.URL, ep.LineSettings(), b.Timeout)
		for _, d := range b.Devices {
			prof := c.DeviceProfile(&d)
			reqs, err := sensors.PlanDevice(prof, b.PlanMaxGap(), sensors.BusCost(ep, *b.Turnaround))
			if err != nil {
				return err
			}
			parts := make([]string, len(reqs))
			for i, r := range reqs {
				parts[i] = r.String()
			}
			fmt.Fprintf(stdout, "  %s: slave %d, %s, every %v, %s in %s (%s)\n",
				d.Name, d.Slave, d.Profile, d.Interval, words.Count(len(prof.Registers), "register"), words.Count(len(reqs), "request"), strings.Join(parts, ", "))
			for _, l := range c.PointChanges(&d) {
				fmt.Fprintf(stdout, "    %s\n", l)
			}
			if d.ReportsByException() {
				fmt.Fprintf(stdout, "    report by exception: %s\n", d.ReportByException())
			}
		}
	}
	for _, s := range c.SerialSensors {
		fmt.Fprintf(stdout, "serial sensor %s: %s, %s\n", s.Name, s.URL, s.Profile)
	}
	if !*live {
		return nil
	}
	fmt.Fprintln(stdout)
	rows := commission.Check(ctx, c, commission.Options{Probe: *probe})
	if err := commission.Print(stdout, rows); err != nil {
		return err
	}
	if commission.Failed(rows) > 0 {
		return errSilent
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

// loadSite makes the logger and loads and checks the site file, printing
// its errors.
func loadSite(file, level, format string, stderr io.Writer) (*config.Config, *slog.Logger, error) {
	log, err := newLoggerFormat(stderr, level, format)
	if err != nil {
		return nil, nil, err
	}
	c, err := loadConfig(file, stderr)
	if err != nil {
		printErr(stderr, err)
		return nil, nil, errSilent
	}
	return c, log, nil
}

func cmdPoll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// Failures are printed below, with a hint: the bus's own warnings
	// would say them twice.
	file, level, parseArgs := siteFlags("poll", stderr, "error")
	if err := parseArgs(args); err != nil {
		return err
	}
	c, log, err := loadSite(*file, *level, "auto", stderr)
	if err != nil {
		return err
	}
	s, err := agent.OpenSensors(c, log)
	if err != nil {
		return err
	}
	defer s.Close()
	// poll numbers its packets from 1, as a gateway's buffer once did: an
	// epoch of its own ("poll-" and 8 random hex digits, new each time)
	// keeps (GatewayId, Epoch, Seq) from naming a packet of the running
	// gateway, should a poll's output reach the platform.
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	epoch := "poll-" + hex.EncodeToString(rnd[:])
	failed := 0
	buf := make([]byte, 0, 1024)
	s.PollOnce(ctx, func(p *packet.Packet, err error) {
		if err != nil {
			failed++
			fmt.Fprintf(stderr, "error: %v\n", err)
			if h := modbus.Hint(err); h != "" {
				fmt.Fprintf(stderr, "  hint: %s\n", h)
			}
			return
		}
		p.Epoch = epoch
		buf = append(p.AppendJSON(buf[:0], s.Values()), '\n')
		_, _ = stdout.Write(buf)
	})
	if failed > 0 {
		fmt.Fprintf(stderr, "%d of %d devices failed\n", failed, c.DeviceCount())
		return errSilent
	}
	return ctx.Err()
}

// earlyHUP holds a SIGHUP that arrives while `gateway run` starts, before
// cmdRun catches it: caught at package init, the earliest point a Go
// program can, it would otherwise kill the daemon (an updater or a fleet
// tool reloading a gateway that just started). Other commands keep the
// default: a hangup ends them.
var earlyHUP = make(chan os.Signal, 1)

func init() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		signal.Notify(earlyHUP, syscall.SIGHUP)
	}
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := flags("run", stderr)
	file := f.String("c", "", "site file")
	level := f.String("log-level", "info", "log level: debug, info, warn, error")
	printAll := f.Bool("print", false, "also print every packet as a JSON line on stdout (always on without an uplink)")
	format := f.String("log-format", "auto", "auto (journal fields under systemd, text on a terminal), text, json or journal")
	cpuProfile := f.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	memProfile := f.String("memprofile", "", "write an allocation profile to this file when the run ends (go tool pprof)")
	if err := parse(f, args); err != nil {
		return err
	}
	stopProfiles, err := startProfiles(*cpuProfile, *memProfile)
	if err != nil {
		return err
	}
	defer stopProfiles(stderr)
	agent.TuneRuntime()
	// SIGHUP reloads the site file; caught from the start (see earlyHUP)
	// so that an early one cannot kill the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	signal.Stop(earlyHUP)
	local, log, err := loadSite(*file, *level, *format, stderr)
	if err != nil {
		return err
	}
	opt := agent.ServeOptions{File: *file, Profiles: loadProfiles, Logger: log, Print: *printAll, Stdout: stdout, Reload: hup,
		Version: version + " (" + commit + ")"}
	return agent.Serve(ctx, local, opt)
}

// maker names a profile's device: its manufacturer, then its model, once
// ("generic RS-485 valve", not "generic generic RS-485 valve").
func maker(manufacturer, model string) string {
	if manufacturer == "" || strings.HasPrefix(strings.ToLower(model), strings.ToLower(manufacturer)) {
		return model
	}
	return manufacturer + " " + model
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
		kind := words.Count(len(p.Registers), "register")
		if p.IsLine() {
			kind = "line, " + words.Count(len(p.Line.Fields), "field")
		}
		fmt.Fprintf(stdout, "%-28s %-8s %-14s %s\n", n, p.DataType, kind, maker(p.Manufacturer, p.Model))
	}
	return nil
}
