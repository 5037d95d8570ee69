// Command gateway is the fieldlink edge gateway: it polls Modbus and serial
// sensors on a farm or mine and turns each reading into a DataHead/DataBody
// packet. Run "gateway help" for the subcommands.
//
// This file and its siblings parse flags, load configuration and wire the
// packages together; the logic lives in those packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/journal"
	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/profile"
)

// Set by the build (scripts/cross-build) with -ldflags -X.
var (
	version = "dev"
	commit  = "unknown"
)

type command struct {
	name  string
	args  string
	short string
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "-c site.yaml [-print]", "the daemon: poll, buffer, deliver to the upstreams (packets on stdout without an uplink)", cmdRun},
		{"demo", "[--for 20s]", "emulated farm and mine, three embedded MQTT brokers, an outage, a live view; no hardware, no setup", cmdDemo},
		{"check", "-c site.yaml [-live]", "validate a site file; errors name file, line and field; -live then checks ports, buffer directory, upstreams and slaves for real", cmdCheck},
		{"poll", "-c site.yaml", "read every device once, print each packet as a JSON line", cmdPoll},
		{"read", "-url URL -slave N -area holding -address A [-count N] [-type T] [-order O]", "ad-hoc register read, like mbpoll", cmdRead},
		{"scan", "-url URL [-slaves 1-247] [-bauds 9600,19200]", "find slave ids and baud rate on a bus", cmdScan},
		{"emulate", "--profile NAME (--listen tcp://127.0.0.1:PORT | --serial PATH --baud N)", "serve emulated sensors", cmdEmulate},
		{"init", "--kind farm|mine [-o site.yaml]", "write a commented starter site file", cmdInit},
		{"buffer", "stats|export|purge -c site.yaml", "the packets waiting for an upstream: counts, JSON lines, or delete (-yes)", cmdBuffer},
		{"write", "-c site.yaml -device D -point P -value V", "write one point as a command would (commissioning): every check, read back, audited; through the daemon or straight to the bus", cmdWrite},
		{"config", "sign -key NAME.key -serial N [-gateway ID]... [-expires 720h] site.yaml", "sign a site file into a bundle that gateways with remote_config pull", cmdConfig},
		{"health", "[-c site.yaml] [-wait 2m] | -record | -forget | -formats | -readable-by FILE", "the updater's gate: wait until the running daemon polls, buffers and (if it could before the update) delivers; else exit 1 with the reason", cmdHealth},
		{"audit", "-c site.yaml [-verify] [-json]", "the downlink's audit log: every command and its outcome; -verify checks its hash chain", cmdAudit},
		{"keygen", "-o NAME", "a new Ed25519 key pair for signed commands: NAME.key (private, 0600) and NAME.pub", cmdKeygen},
		{"command", "sign -key NAME.key < command.json", "sign a downlink command: its JSON on stdin, signed on stdout", cmdCommand},
		{"delphi", "-i experts.csv [-asked N]", "the Delphi step of DRF (docs/algorithms.md § 000): expert estimates to the drf selector's TR and N (YAML)", cmdDelphi},
		{"lab", "[-scenarios S1,S2] [-seeds 5] [-o docs/selector-lab.md]", "the selector lab: every strategy in simulated scenarios, report and charts", cmdLab},
		{"profiles", "[-c site.yaml]", "list the firmware profiles", cmdProfiles},
		{"version", "", "print the version", cmdVersion},
	}
}

// devOnly reports whether a command is left out of the field build's
// usage (it still answers, to say how to run it).
func devOnly(name string) bool {
	return fieldBuild && (name == "demo" || name == "lab" || name == "emulate" || name == "delphi")
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "fieldlink gateway %s: Modbus and serial sensors to DataHead/DataBody packets\n\nUsage:\n", version)
	for _, c := range commands() {
		if devOnly(c.name) {
			continue
		}
		fmt.Fprintf(w, "  gateway %-8s %s\n      %s\n", c.name, c.args, c.short)
	}
	fmt.Fprintf(w, "\nRun \"gateway COMMAND -h\" for a command's flags.\n")
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// errSilent is returned by a command that already printed why it failed.
var errSilent = errors.New("")

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				return 2
			case errors.Is(err, errSilent):
				return 1
			}
			fmt.Fprintf(stderr, "gateway %s: %v\n", c.name, err)
			return 1
		}
	}
	names := make([]string, 0, len(commands()))
	for _, c := range commands() {
		names = append(names, c.name)
	}
	fmt.Fprintf(stderr, "gateway: unknown command %q%s\n\n", args[0], yamlconf.DidYouMean(args[0], names))
	usage(stderr)
	return 2
}

var errUsage = errors.New("usage")

// flags returns a FlagSet that prints its usage to stderr.
func flags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gateway "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args, turning a flag error into errUsage (already printed).
// A command with a -c flag also takes its site file as its one argument
// ("gateway check site.yaml"), with flags before or after it.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if site := fs.Lookup("c"); site != nil && !isSet(fs, "c") && fs.NArg() > 0 {
		if err := fs.Set("c", fs.Arg(0)); err != nil {
			return errUsage
		}
		return parse(fs, fs.Args()[1:])
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// loadProfiles is the production profile source: embedded, plus a dir.
func loadProfiles(dir string) (profile.Set, error) {
	return profile.Load(firmwareprofiles.FS, dir)
}

// loadConfig loads and validates a site file, printing its warnings.
func loadConfig(file string, stderr io.Writer) (*config.Config, error) {
	if file == "" {
		return nil, fmt.Errorf("no site file: give -c site.yaml (gateway init --kind farm writes a starter)")
	}
	c, err := config.Load(file, loadProfiles)
	if err != nil {
		return nil, err
	}
	for _, w := range c.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	return c, nil
}

// newLogger logs to w at the given level ("debug", "info", "warn",
// "error"): as journal entries with a field per attribute when w is the
// journal's stream (a systemd service), as JSON lines under systemd
// otherwise (where INVOCATION_ID is set), as text for a terminal; or as
// FIELDLINK_LOG_FORMAT says.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	return newLoggerFormat(w, level, "auto")
}

// newLoggerFormat is newLogger with the format chosen: auto, text, json or
// journal (JSON lines on w when the journal's socket cannot be reached).
func newLoggerFormat(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %v (valid: debug, info, warn, error)", err)
	}
	format, fromEnv := journal.ChooseFormat(w, format)
	log, err := journal.NewLogger(w, format, journalSocket, "fieldlink-gateway", &slog.HandlerOptions{Level: l})
	if err != nil {
		what := "-log-format"
		if fromEnv {
			what = journal.FormatEnv
		}
		return nil, fmt.Errorf("%s: %q (valid: auto, text, json, journal)", what, format)
	}
	return log, nil
}

// journalSocket is the journal's socket; tests point it elsewhere.
var journalSocket = journal.Socket

func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(version, commit, info))
	return nil
}

// versionLine names the version and commit: the commit stamped by the
// build (scripts/cross-build), else the one the go command recorded when
// it built from a clone.
func versionLine(version, commit string, info *debug.BuildInfo) string {
	if commit == "unknown" && info != nil {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			commit = rev
			if modified == "true" {
				commit += ", modified"
			}
		}
	}
	return fmt.Sprintf("fieldlink gateway %s (commit %s)", version, commit)
}
