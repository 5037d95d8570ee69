// Command footprint measures what the gateway costs to run, side by side
// with Telegraf and with Node-RED doing the same job in the same run: poll
// emulated Modbus TCP devices, build the DataHead/DataBody packets and
// publish them at QoS 1 to a local mosquitto, at three rates:
//
//	10 pkt/s     10 devices x  20 registers every 1 s
//	100 pkt/s    10 devices x 100 registers every 100 ms
//	1000 pkt/s  100 devices x 100 registers every 100 ms
//
//	go run ./scripts/footprint [-steps 10,100,1000] [-duration 60s] [-warmup 10s]
//
// It builds the gateway (-tags field -trimpath -ldflags '-s -w') into a
// temporary directory. For each step it serves the devices with `gateway
// emulate` on one loopback port, starts one mosquitto on a free loopback
// port and one QoS 1 subscriber on it that decodes, checks and counts every
// packet, then starts the systems together: the gateway with its defaults
// (durability: always), Telegraf (a custom build, see telegraf.go) and
// Node-RED (up to -node-red-max pkt/s). Once all have delivered, and after
// the warm-up, it measures all for the same window: resident memory of
// each process tree (VmRSS, once a second), CPU time (utime+stime) and bytes
// written to the disk (write_bytes of /proc/PID/io), and prints, per step
// and system, resident median and max, CPU seconds per 1,000 packets and
// share of one core, bytes written per packet and packets delivered.
//
// Node-RED is installed with `npm ci` from package.json and
// package-lock.json in this directory, and Telegraf with `go install`, into
// a cache directory outside the repository (-cache, default
// $XDG_CACHE_HOME/fieldlink-footprint), once.
//
// It exits 1 if a target of the gateway is missed (see targets), if a
// system delivered less than -min-delivery of the expected packets or from
// fewer than all devices, or if any packet had the wrong shape; 2 if the
// run could not be set up.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// step is one load of the comparison.
type step struct {
	rate      int // packets per second
	devices   int
	registers int
	interval  time.Duration
}

// steps are the loads -steps can name, by rate.
var steps = map[int]step{
	10:   {10, 10, 20, time.Second},
	100:  {100, 10, 100, 100 * time.Millisecond},
	1000: {1000, 100, 100, 100 * time.Millisecond},
}

func (s step) String() string {
	return fmt.Sprintf("%d pkt/s (%d devices x %d registers every %s)", s.rate, s.devices, s.registers, s.interval)
}

// expected is the packets one system should deliver in d.
func (s step) expected(d time.Duration) int { return s.devices * int(d/s.interval) }

type options struct {
	steps                           []step
	duration, warmup, startTimeout  time.Duration
	maxRSS                          float64 // MB
	minDelivery                     float64
	nodeRED, telegraf, editor, keep bool
	nodeREDMax                      int
	cache, mosquitto, dist, gateway string
	base                            string // an earlier revision's gateway binary, measured beside
	csv                             string
}

func main() {
	var o options
	var stepList string
	fs := flag.NewFlagSet("footprint", flag.ExitOnError)
	fs.StringVar(&stepList, "steps", "10,100,1000", "the loads to run, by rate in packets per second: 10, 100, 1000")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "measured window of each step")
	fs.DurationVar(&o.warmup, "warmup", 10*time.Second, "time after every system's first packet before the window opens")
	fs.DurationVar(&o.startTimeout, "start-timeout", 2*time.Minute, "how long to wait for each system's first packet")
	fs.Float64Var(&o.maxRSS, "max-rss", 25, "fail if the gateway's resident max reaches this many MB (10^6 bytes)")
	fs.Float64Var(&o.minDelivery, "min-delivery", 0.9, "fail if a system delivers less than this share of devices × window/interval packets")
	fs.BoolVar(&o.nodeRED, "node-red", true, "also run Node-RED")
	fs.IntVar(&o.nodeREDMax, "node-red-max", 100, "run Node-RED only at steps up to this rate (it does not keep up beyond)")
	fs.BoolVar(&o.telegraf, "telegraf", true, "also run Telegraf")
	fs.BoolVar(&o.editor, "node-red-editor", false, "run Node-RED with its editor and admin API on a loopback port, as a default install does (default: without, in its favour)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, site file, flows, Telegraf config) even on success")
	fs.StringVar(&o.cache, "cache", defaultCache(), "where Node-RED and Telegraf are installed (outside the repository)")
	fs.StringVar(&o.mosquitto, "mosquitto", "", "mosquitto binary (default: PATH, then /usr/sbin/mosquitto)")
	fs.StringVar(&o.gateway, "gateway", "", "measure this gateway binary instead of building ./cmd/gateway")
	fs.StringVar(&o.base, "base-gateway", "", "also measure this gateway binary (an earlier revision's build, see scripts/bench-compare) in the same run, as \"fieldlink (base)\", and print the gateway's figures over it")
	fs.StringVar(&o.csv, "samples", "", "also write every sample to this CSV file (step, system, seconds since start, in window, RSS, anon, file, CPU, written)")
	fs.StringVar(&o.dist, "dist", "dist", "directory of `make dist`'s binaries, relative to the repository")
	_ = fs.Parse(os.Args[1:])
	for _, f := range strings.Split(stepList, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		st, ok := steps[r]
		if err != nil || !ok {
			fmt.Fprintf(os.Stderr, "footprint: -steps: %q is not one of 10, 100, 1000\n", f)
			os.Exit(2)
		}
		o.steps = append(o.steps, st)
	}
	if fs.NArg() > 0 || len(o.steps) == 0 || o.duration < time.Second {
		fmt.Fprintln(os.Stderr, "footprint: want no arguments, at least one step and -duration ≥ 1s")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, o, os.Stdout)
	stop()
	os.Exit(code)
}

func defaultCache() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "fieldlink-footprint")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "fieldlink-footprint")
	}
	return filepath.Join(os.TempDir(), "fieldlink-footprint-cache")
}

func run(ctx context.Context, o options, out io.Writer) int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	tmp, err := os.MkdirTemp("", "fieldlink-footprint-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "footprint:", err)
		return 2
	}
	keep := o.keep
	defer func() {
		if keep {
			fmt.Fprintf(out, "logs, site files, flows and configs kept in %s\n", tmp)
			return
		}
		os.RemoveAll(tmp)
	}()
	code, broken, err := measureAll(ctx, o, root, tmp, out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	// Logs matter when something did not work, not when a target was missed.
	keep = keep || err != nil || broken
	return code
}

func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(b))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("footprint: run me inside the fieldlink module (go env GOMOD: %q, %v)", mod, err)
	}
	return filepath.Dir(mod), nil
}
