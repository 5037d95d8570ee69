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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"fieldlink/internal/testtool"
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

// system is one side of the comparison while it runs.
type system struct {
	name    string
	proc    *child
	ledger  *ledger
	sampler *sampler
	w0, w1  usage
	samples []usage
	install int64 // bytes on disk to run it
	detail  string
	f       figures // once measured
}

// figures are what the report shows of one system at one step.
type figures struct {
	rssMedian, rssMax, hwm int64
	anonMedian, fileMedian int64
	cpu, before, window    time.Duration
	written                int64 // bytes written to the disk in the window; -1 if unknown
	packets, dups, devs    int
	size                   int // bytes of the last packet
}

func (s *system) figures() figures {
	var f figures
	var rss, anon, file []int64
	for _, u := range s.samples {
		f.rssMax = max(f.rssMax, u.RSS)
		f.hwm = max(f.hwm, u.HWM)
		if !u.At.Before(s.w0.At) && !u.At.After(s.w1.At) {
			rss, anon, file = append(rss, u.RSS), append(anon, u.Anon), append(file, u.File)
		}
	}
	f.rssMedian, f.anonMedian, f.fileMedian = median(rss), median(anon), median(file)
	f.cpu = s.w1.CPU - s.w0.CPU
	f.before = s.w0.CPU
	f.window = s.w1.At.Sub(s.w0.At)
	f.written = -1
	if s.w0.Written >= 0 && s.w1.Written >= 0 {
		f.written = s.w1.Written - s.w0.Written
	}
	f.packets, f.dups, f.devs = s.ledger.count(s.w0.At, s.w1.At)
	f.size = len(s.ledger.sample())
	return f
}

// perK is CPU seconds per 1,000 packets.
func (f figures) perK() float64 {
	if f.packets == 0 {
		return 0
	}
	return f.cpu.Seconds() / float64(f.packets) * 1000
}

// share is the CPU time over the window: the share of one core.
func (f figures) share() float64 {
	if f.window <= 0 {
		return 0
	}
	return f.cpu.Seconds() / f.window.Seconds()
}

// writtenPerPacket is bytes written to the disk per packet delivered, and
// that over the packet's size; -1 when unknown.
func (f figures) writtenPerPacket() (bytes, times float64) {
	if f.written < 0 || f.packets == 0 {
		return -1, -1
	}
	bytes = float64(f.written) / float64(f.packets)
	if f.size == 0 {
		return bytes, -1
	}
	return bytes, bytes / float64(f.size)
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

// binaries are the programs the steps run.
type binaries struct {
	gateway, mosquitto, red, node, telegraf string
}

// measureAll installs and builds what the steps need, runs every step, and
// prints the report.
func measureAll(ctx context.Context, o options, root, tmp string, out io.Writer) (code int, broken bool, err error) {
	var bin binaries
	if o.nodeRED {
		if bin.red, err = installNodeRED(filepath.Join(root, "scripts", "footprint"), o.cache, os.Stdout); err != nil {
			return 2, false, err
		}
		if bin.node, err = exec.LookPath("node"); err != nil {
			return 2, false, errors.New("footprint: node not found: Node-RED needs Node.js 20")
		}
	}
	if o.telegraf {
		if bin.telegraf, err = installTelegraf(o.cache, os.Stdout); err != nil {
			return 2, false, err
		}
	}
	if bin.mosquitto, err = findMosquitto(o.mosquitto); err != nil {
		return 2, false, err
	}
	bin.gateway = o.gateway
	if bin.gateway == "" {
		bin.gateway = filepath.Join(tmp, "gateway")
		// The release build, as the tests build it (testtool.Build).
		ship := testtool.Build{Tags: []string{"field", "nethttpomithttp2"}, Static: true, Release: true}
		fmt.Fprintf(out, "building the gateway as it ships (CGO_ENABLED=0 go %s) ...\n", strings.Join(ship.Args(bin.gateway), " "))
		build := exec.Command("go", ship.Args(bin.gateway)...)
		build.Dir = root
		build.Env = ship.Env()
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return 2, false, fmt.Errorf("footprint: go build ./cmd/gateway: %w", err)
		}
	} else if bin.gateway, err = filepath.Abs(bin.gateway); err != nil {
		return 2, false, err
	}

	var results [][]*system
	for i, st := range o.steps {
		dir := filepath.Join(tmp, strconv.Itoa(st.rate))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 2, false, err
		}
		fmt.Fprintf(out, "step %d of %d: %s\n", i+1, len(o.steps), st)
		systems, err := measureStep(ctx, o, st, bin, dir, out)
		if err != nil {
			return 2, false, err
		}
		if o.csv != "" {
			if err := writeSamples(o.csv, st, systems, i > 0); err != nil {
				return 2, false, err
			}
		}
		results = append(results, systems)
	}
	code, broken = report(o, root, results, out)
	return code, broken, nil
}

// measureStep runs one step: devices, broker, subscriber and every system
// at once, for the warm-up and the window. Every process it starts is
// stopped before it returns.
func measureStep(ctx context.Context, o options, st step, bin binaries, tmp string, out io.Writer) ([]*system, error) {
	regs := deviceRegisters(st.registers)
	profile := profileFor(st.registers)
	profiles := filepath.Join(tmp, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(profiles, profile+".yaml"), []byte(profileYAML(regs)), 0o644); err != nil {
		return nil, err
	}

	var stops []func()
	defer func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}()

	broker, brokerAddr, err := serve("mosquitto", filepath.Join(tmp, "mosquitto.log"), func(port int) []string {
		conf := filepath.Join(tmp, "mosquitto.conf")
		_ = os.WriteFile(conf, []byte(testtool.MosquittoConfig(port)), 0o600)
		return []string{bin.mosquitto, "-c", conf}
	})
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { broker.stop(5 * time.Second) })

	// One emulator per connection: each serves its devicesPerConn slaves
	// on its own port.
	var emuAddrs []string
	for first := 1; first <= st.devices; first += devicesPerConn {
		emu, addr, err := serve("emulator", filepath.Join(tmp, fmt.Sprintf("emulator-%d.log", len(emuAddrs)+1)), func(port int) []string {
			argv := []string{bin.gateway, "emulate", "--profiles-dir", profiles, "--listen", fmt.Sprintf("tcp://127.0.0.1:%d", port), "--log-level", "warn"}
			for i := first; i <= min(first+devicesPerConn-1, st.devices); i++ {
				argv = append(argv, "--profile", fmt.Sprintf("%s@%d", profile, i))
			}
			return argv
		})
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { emu.stop(5 * time.Second) })
		emuAddrs = append(emuAddrs, addr)
	}
	emuAddr := emuAddrs[0]

	ours := &system{name: "fieldlink", ledger: newLedger("fieldlink", ourTopic, ourGateway, st.devices, regs)}
	systems := []*system{ours}
	var tele, red *system
	if o.telegraf {
		tele = &system{name: "Telegraf", ledger: newLedger("Telegraf", telegrafTopic, telegrafGateway, st.devices, regs)}
		tele.ledger.anyOrder = true
		systems = append(systems, tele)
	}
	if o.nodeRED && st.rate <= o.nodeREDMax {
		red = &system{name: "Node-RED", ledger: newLedger("Node-RED", theirTopic, theirGateway, st.devices, regs)}
		systems = append(systems, red)
	}
	ledgers := make([]*ledger, len(systems))
	for i, s := range systems {
		ledgers[i] = s.ledger
	}
	disconnect, err := subscribe(brokerAddr, ledgers...)
	if err != nil {
		return nil, err
	}
	stops = append(stops, disconnect)
	startSystem := func(s *system, env []string, argv ...string) error {
		proc, err := start(strings.ToLower(s.name), filepath.Join(tmp, strings.ToLower(s.name)+".log"), tmp, env, argv...)
		if err != nil {
			return err
		}
		s.proc = proc
		stops = append(stops, func() { proc.stop(10 * time.Second) })
		s.sampler = startSampler(proc.pid(), time.Second)
		return nil
	}

	// The gateway.
	site := filepath.Join(tmp, "site.yaml")
	if err := os.WriteFile(site, []byte(siteYAML(profiles, profile, emuAddrs, brokerAddr, filepath.Join(tmp, "buffer.db"), st.devices, st.interval)), 0o644); err != nil {
		return nil, err
	}
	if err := startSystem(ours, nil, bin.gateway, "run", "-c", site, "-log-level", "warn"); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(bin.gateway); err == nil {
		ours.install = fi.Size()
		ours.detail = fmt.Sprintf("one static binary, %s %s", runtime.GOOS, runtime.GOARCH)
	}

	// Telegraf, at the same time.
	if tele != nil {
		conf := filepath.Join(tmp, "telegraf.conf")
		if err := os.WriteFile(conf, []byte(telegrafConf(emuAddrs, brokerAddr, st.devices, regs, st.interval, newEpoch())), 0o644); err != nil {
			return nil, err
		}
		if err := startSystem(tele, nil, bin.telegraf, "--config", conf); err != nil {
			return nil, err
		}
		if fi, err := os.Stat(bin.telegraf); err == nil {
			tele.install = fi.Size()
			tele.detail = fmt.Sprintf("one static binary, Telegraf %s built with -tags %s", telegrafVersion, telegrafTags)
		}
	}

	// Node-RED, at the same time.
	if red != nil {
		userDir := filepath.Join(tmp, "node-red")
		if err := os.MkdirAll(userDir, 0o755); err != nil {
			return nil, err
		}
		host, port, _ := strings.Cut(emuAddr, ":")
		eport, _ := strconv.Atoi(port)
		bhost, bp, _ := strings.Cut(brokerAddr, ":")
		bport, _ := strconv.Atoi(bp)
		flows, err := flowsJSON(host, eport, bhost, bport, st.devices, regs, st.interval, newEpoch())
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(userDir, "flows.json"), flows, 0o644); err != nil {
			return nil, err
		}
		settings := filepath.Join(userDir, "settings.js")
		uiPort := 0
		if o.editor {
			if uiPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		if err := os.WriteFile(settings, []byte(settingsJS("flows.json", uiPort)), 0o644); err != nil {
			return nil, err
		}
		if err := startSystem(red, []string{"NODE_ENV=production"}, bin.node, bin.red, "--settings", settings, "--userDir", userDir); err != nil {
			return nil, err
		}
		red.install = treeBytes(filepath.Join(o.cache, "node_modules"))
		nodeBin, _ := filepath.EvalSymlinks(bin.node)
		if fi, err := os.Stat(nodeBin); err == nil {
			red.install += fi.Size()
		}
		v, _ := exec.Command(bin.node, "--version").Output()
		red.detail = fmt.Sprintf("node %s binary + node_modules (node-red 4.1.15, node-red-contrib-modbus 5.23.3)", strings.TrimSpace(string(v)))
		if o.editor {
			red.name = "Node-RED (with editor)"
			fmt.Fprintf(out, "Node-RED editor on http://127.0.0.1:%d/\n", uiPort)
		}
	}

	// Wait until all deliver, warm up, measure the same window.
	names := make([]string, len(systems))
	for i, s := range systems {
		names[i] = s.name
	}
	fmt.Fprintf(out, "  waiting for the first packets (%s) ...\n", strings.Join(names, ", "))
	for _, s := range systems {
		if err := waitFirst(ctx, s, o.startTimeout); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(out, "  all deliver; %s warm-up, then a %s window ...\n", o.warmup, o.duration)
	if err := sleep(ctx, o.warmup, systems); err != nil {
		return nil, err
	}
	for _, s := range systems {
		if s.w0, err = s.sampler.sample(); err != nil {
			return nil, fmt.Errorf("footprint: %s: %w", s.name, err)
		}
	}
	if err := sleep(ctx, o.duration, systems); err != nil {
		return nil, err
	}
	for _, s := range systems {
		if s.w1, err = s.sampler.sample(); err != nil {
			return nil, fmt.Errorf("footprint: %s: %w", s.name, err)
		}
	}
	for _, s := range systems {
		s.samples = s.sampler.Stop()
		s.f = s.figures()
	}
	return systems, nil
}

// writeSamples writes every sample of every system of a step as CSV, after
// those of the steps before when appending.
func writeSamples(path string, st step, systems []*system, appending bool) error {
	var b strings.Builder
	if !appending {
		b.WriteString("rate,system,seconds,window,rss_bytes,anon_bytes,file_bytes,cpu_seconds,written_bytes\n")
	}
	for _, s := range systems {
		for _, u := range s.samples {
			in := !u.At.Before(s.w0.At) && !u.At.After(s.w1.At)
			fmt.Fprintf(&b, "%d,%s,%.1f,%t,%d,%d,%d,%.2f,%d\n", st.rate, s.name, u.At.Sub(s.samples[0].At).Seconds(), in, u.RSS, u.Anon, u.File, u.CPU.Seconds(), u.Written)
		}
	}
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appending {
		flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err == nil {
		_, err = f.WriteString(b.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("footprint: %w", err)
	}
	return nil
}

// waitFirst waits for the first good packet of s.
func waitFirst(ctx context.Context, s *system, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for s.ledger.firstAt().IsZero() {
		if !s.proc.running() {
			return fmt.Errorf("footprint: %s exited before its first packet; its log ends:\n%s", s.name, s.proc.tail(20))
		}
		if time.Now().After(deadline) {
			n, ex := s.ledger.issues()
			return fmt.Errorf("footprint: no good packet from %s in %s (%d bad: %s); its log ends:\n%s",
				s.name, timeout, n, strings.Join(ex, "; "), s.proc.tail(20))
		}
		if err := sleep(ctx, 100*time.Millisecond, nil); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits for d, failing early on an interrupt or when a system exits.
func sleep(ctx context.Context, d time.Duration, systems []*system) error {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("footprint: interrupted")
		case <-t.C:
			return nil
		case <-tick.C:
			for _, s := range systems {
				if !s.proc.running() {
					return fmt.Errorf("footprint: %s exited during the run; its log ends:\n%s", s.name, s.proc.tail(20))
				}
			}
		}
	}
}

func newEpoch() string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

func mb(b int64) string { return fmt.Sprintf("%.1f", float64(b)/1e6) }

// targets are the gateway's figures to meet, by step rate:
// CPU seconds per 1,000 packets, and the share of one core. The window
// must also hold every packet (at least -min-delivery of them).
var targets = map[int]struct{ perK, share float64 }{
	10:   {perK: 0.4},
	100:  {perK: 0.3},
	1000: {share: 0.35},
}

// report prints a table per step and a summary of all, and returns the exit
// code of the checks, and whether a system did not work (too few packets,
// wrong shapes).
func report(o options, root string, results [][]*system, out io.Writer) (code int, broken bool) {
	failed := false
	fail := func(format string, a ...any) {
		fmt.Fprintf(out, "FAIL: "+format+"\n", a...)
		failed = true
	}
	fmt.Fprintf(out, "\n== footprint: Modbus TCP -> MQTT QoS 1, %s windows (%s warm-up), %d cores, %s ==\n",
		o.duration, o.warmup, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02T15:04Z"))
	for i, systems := range results {
		st := o.steps[i]
		expected := st.expected(o.duration)
		fmt.Fprintf(out, "\n-- %s --\n", st)
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		row := func(label string, cell func(f figures) string) {
			fmt.Fprintf(w, "%s\t", label)
			for _, s := range systems {
				fmt.Fprintf(w, "%s\t", cell(s.f))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "\t")
		for _, s := range systems {
			fmt.Fprintf(w, "%s\t", s.name)
		}
		fmt.Fprintln(w)
		row("resident median, MB", func(f figures) string { return mb(f.rssMedian) })
		row("  of which anonymous (heap, stacks)", func(f figures) string { return mb(f.anonMedian) })
		row("  of which file-backed (code, mmap)", func(f figures) string { return mb(f.fileMedian) })
		row("resident max (from start), MB", func(f figures) string { return mb(f.rssMax) })
		row("CPU s per 1,000 packets", func(f figures) string { return fmt.Sprintf("%.3f", f.perK()) })
		row("share of one core", func(f figures) string { return fmt.Sprintf("%.1f%%", 100*f.share()) })
		row("CPU s before the window (start-up, warm-up)", func(f figures) string { return fmt.Sprintf("%.2f", f.before.Seconds()) })
		row("bytes written to disk per packet", func(f figures) string {
			b, x := f.writtenPerPacket()
			switch {
			case b < 0:
				return "n/a"
			case x < 0:
				return fmt.Sprintf("%.0f", b)
			}
			return fmt.Sprintf("%.0f (%.1fx)", b, x)
		})
		row("packet size, bytes", func(f figures) string { return strconv.Itoa(f.size) })
		row(fmt.Sprintf("packets delivered (expected %d)", expected), func(f figures) string { return strconv.Itoa(f.packets) })
		_ = w.Flush()

		for _, s := range systems {
			f := s.f
			if float64(f.packets) < o.minDelivery*float64(expected) {
				fail("%s at %d pkt/s delivered %d packets in the window, expected %d (at least %.0f%%)", s.name, st.rate, f.packets, expected, o.minDelivery*100)
				broken = broken || s.name == "fieldlink"
			}
			if f.devs < st.devices {
				fail("%s at %d pkt/s delivered from %d of %d devices", s.name, st.rate, f.devs, st.devices)
				broken = broken || s.name == "fieldlink"
			}
			if n, ex := s.ledger.issues(); n > 0 {
				fail("%s: %d packets of the wrong shape, e.g. %s", s.name, n, strings.Join(ex, "; "))
				broken = true
			}
			if f.dups > 0 {
				fmt.Fprintf(out, "note: %s: %d duplicate deliveries in the window (at-least-once)\n", s.name, f.dups)
			}
		}
		ours := systems[0].f
		if float64(ours.rssMax) >= o.maxRSS*1e6 {
			fail("gateway resident max %s MB at %d pkt/s, target under %g MB", mb(ours.rssMax), st.rate, o.maxRSS)
		}
		if t, ok := targets[st.rate]; ok {
			if t.perK > 0 && ours.perK() > t.perK {
				fail("gateway CPU per 1,000 packets at %d pkt/s: %.3f s, target at most %g s", st.rate, ours.perK(), t.perK)
			}
			if t.share > 0 && ours.share() > t.share {
				fail("gateway share of one core at %d pkt/s: %.1f%%, target at most %.0f%%", st.rate, 100*ours.share(), 100*t.share)
			}
		}
	}

	// The summary: every system at every rate, side by side.
	fmt.Fprintf(out, "\n== summary (resident median; CPU per 1,000 packets; share of one core; bytes written per packet) ==\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "rate\tsystem\tdelivered\tresident MB\tCPU s/1000\tcore\twritten B/pkt\t\n")
	for i, systems := range results {
		st := o.steps[i]
		for _, s := range systems {
			b, x := s.f.writtenPerPacket()
			written := "n/a"
			if b >= 0 {
				written = fmt.Sprintf("%.0f", b)
				if x >= 0 {
					written += fmt.Sprintf(" (%.1fx)", x)
				}
			}
			fmt.Fprintf(w, "%d pkt/s\t%s\t%d/%d\t%s\t%.3f\t%.1f%%\t%s\t\n", st.rate, s.name, s.f.packets, st.expected(o.duration),
				mb(s.f.rssMedian), s.f.perK(), 100*s.f.share(), written)
		}
	}
	_ = w.Flush()
	fmt.Fprintf(out, "(MB = 10^6 bytes; resident = VmRSS of the process tree, sampled every second; CPU = utime+stime; written = write_bytes of /proc/PID/io)\n")
	for _, s := range results[0] {
		fmt.Fprintf(out, "install: %s %s MB = %s\n", s.name, mb(s.install), s.detail)
	}
	printDist(out, filepath.Join(root, o.dist))
	for _, s := range results[0] {
		if p := s.ledger.sample(); p != nil {
			fmt.Fprintf(out, "%s packet: %s\n", s.name, p)
		}
	}
	if failed {
		return 1, broken
	}
	fmt.Fprintln(out, "ok: every target met, every system delivered")
	return 0, false
}

// printDist prints the size of the newest `make dist` binary per target.
func printDist(out io.Writer, dist string) {
	files, _ := filepath.Glob(filepath.Join(dist, "fieldlink-gateway_*_linux_*"))
	newest := map[string]os.FileInfo{}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		i := strings.LastIndex(f, "_linux_")
		target := f[i+len("_linux_"):]
		if cur, ok := newest[target]; !ok || st.ModTime().After(cur.ModTime()) {
			newest[target] = st
		}
	}
	if len(newest) == 0 {
		fmt.Fprintf(out, "binary size per target: no binaries in %s (run make dist)\n", dist)
		return
	}
	var parts []string
	for _, t := range []string{"armv6", "armv7", "arm64", "amd64"} {
		if st, ok := newest[t]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f MiB (%s)", t, float64(st.Size())/(1<<20), st.Name()))
		}
	}
	fmt.Fprintf(out, "binary size per target (%s, make dist): %s\n", dist, strings.Join(parts, ", "))
}
