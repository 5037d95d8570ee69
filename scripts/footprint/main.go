// Command footprint measures what the gateway costs to run, side by side
// with Node-RED and node-red-contrib-modbus doing the same job in the same
// run: poll emulated Modbus TCP devices (10 devices × 20 holding registers
// at 1 s by default), build the DataHead/DataBody packets and publish them
// at QoS 1 to a local mosquitto.
//
//	go run ./scripts/footprint [-duration 60s] [-warmup 10s] [-devices 10] [-interval 1s]
//
// It builds the gateway (-trimpath -ldflags '-s -w') into a temporary
// directory, serves the devices with `gateway emulate` on one loopback
// port, starts one mosquitto on a free loopback port and one QoS 1
// subscriber on it that checks and counts every packet, then starts the
// gateway and Node-RED together. Once both have delivered, and after the
// warm-up, it measures both for the same window: resident memory of each
// process tree (VmRSS, once a second) and CPU time (utime+stime), and it
// prints resident median and max, CPU seconds per 1,000 packets, packets
// delivered, install sizes, the ratios ours/theirs and the sizes of the
// binaries in dist/.
//
// Node-RED is installed with `npm ci` from package.json and
// package-lock.json in this directory into a cache directory outside the
// repository (-cache, default $XDG_CACHE_HOME/fieldlink-footprint), once
// per change of the lock file.
//
// It exits 1 if the gateway's resident max reaches -max-rss, if its memory
// is not under -max-ratio of Node-RED's (median and max), if either side
// delivered less than -min-delivery of the expected packets or from fewer
// than all devices, or if any packet had the wrong shape; 2 if the run
// could not be set up.
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

type options struct {
	duration, warmup, interval, startTimeout time.Duration
	devices                                  int
	maxRSS                                   float64 // MB
	maxRatio, minDelivery                    float64
	nodeRED, editor, keep                    bool
	cache, mosquitto, dist, gateway, csv     string
}

func main() {
	var o options
	fs := flag.NewFlagSet("footprint", flag.ExitOnError)
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "measured window")
	fs.DurationVar(&o.warmup, "warmup", 10*time.Second, "time after both systems' first packet before the window opens")
	fs.DurationVar(&o.interval, "interval", time.Second, "poll interval of every device, both systems")
	fs.DurationVar(&o.startTimeout, "start-timeout", 2*time.Minute, "how long to wait for each system's first packet")
	fs.IntVar(&o.devices, "devices", 10, "emulated devices (slaves 1..N on one Modbus TCP port), 20 holding registers each")
	fs.Float64Var(&o.maxRSS, "max-rss", 25, "fail if the gateway's resident max reaches this many MB (10^6 bytes)")
	fs.Float64Var(&o.maxRatio, "max-ratio", 0.1, "fail unless the gateway's resident memory (median and max) is under this share of Node-RED's")
	fs.Float64Var(&o.minDelivery, "min-delivery", 0.9, "fail if a system delivers less than this share of devices × window/interval packets")
	fs.BoolVar(&o.nodeRED, "node-red", true, "also run Node-RED (false: the gateway alone, no ratios)")
	fs.BoolVar(&o.editor, "node-red-editor", false, "run Node-RED with its editor and admin API on a loopback port, as a default install does (default: without, in its favour)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, site file, flows) even on success")
	fs.StringVar(&o.cache, "cache", defaultCache(), "where Node-RED is installed (outside the repository)")
	fs.StringVar(&o.mosquitto, "mosquitto", "", "mosquitto binary (default: PATH, then /usr/sbin/mosquitto)")
	fs.StringVar(&o.gateway, "gateway", "", "measure this gateway binary instead of building ./cmd/gateway")
	fs.StringVar(&o.csv, "samples", "", "also write every sample to this CSV file (system, seconds since start, in window, RSS, anon, file, CPU)")
	fs.StringVar(&o.dist, "dist", "dist", "directory of `make dist`'s binaries, relative to the repository")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 || o.devices < 1 || o.devices > 247 || o.interval < 100*time.Millisecond || o.duration < o.interval {
		fmt.Fprintln(os.Stderr, "footprint: want no arguments, -devices 1..247, -interval ≥ 100ms and -duration ≥ -interval")
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
}

// figures are what the report shows of one system.
type figures struct {
	rssMedian, rssMax, hwm int64
	anonMedian, fileMedian int64
	cpu, before            time.Duration
	packets, dups, devs    int
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
	f.packets, f.dups, f.devs = s.ledger.count(s.w0.At, s.w1.At)
	return f
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
			fmt.Fprintf(out, "logs, site file and flows kept in %s\n", tmp)
			return
		}
		os.RemoveAll(tmp)
	}()
	code, broken, err := measureBoth(ctx, o, root, tmp, out)
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

// measureBoth sets everything up, runs the two systems, and prints the
// report. Every process it starts is stopped before it returns. broken
// says a system did not deliver or delivered packets of the wrong shape.
func measureBoth(ctx context.Context, o options, root, tmp string, out io.Writer) (code int, broken bool, err error) {
	var red string
	if o.nodeRED {
		if red, err = installNodeRED(filepath.Join(root, "scripts", "footprint"), o.cache, os.Stdout); err != nil {
			return 2, false, err
		}
	}
	mosq, err := findMosquitto(o.mosquitto)
	if err != nil {
		return 2, false, err
	}

	gw := o.gateway
	if gw == "" {
		gw = filepath.Join(tmp, "gateway")
		fmt.Fprintf(out, "building the gateway as it ships (CGO_ENABLED=0 go build -tags field -trimpath -ldflags '-s -w') ...\n")
		build := exec.Command("go", "build", "-tags", "field", "-trimpath", "-ldflags", "-s -w", "-o", gw, "./cmd/gateway")
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return 2, false, fmt.Errorf("footprint: go build ./cmd/gateway: %w", err)
		}
	} else if gw, err = filepath.Abs(gw); err != nil {
		return 2, false, err
	}
	profiles := filepath.Join(tmp, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		return 2, false, err
	}
	if err := os.WriteFile(filepath.Join(profiles, profileName+".yaml"), []byte(profileYAML()), 0o644); err != nil {
		return 2, false, err
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
		return []string{mosq, "-c", conf}
	})
	if err != nil {
		return 2, false, err
	}
	stops = append(stops, func() { broker.stop(5 * time.Second) })

	emu, emuAddr, err := serve("emulator", filepath.Join(tmp, "emulator.log"), func(port int) []string {
		argv := []string{gw, "emulate", "--profiles-dir", profiles, "--listen", fmt.Sprintf("tcp://127.0.0.1:%d", port), "--log-level", "warn"}
		for i := 1; i <= o.devices; i++ {
			argv = append(argv, "--profile", fmt.Sprintf("%s@%d", profileName, i))
		}
		return argv
	})
	if err != nil {
		return 2, false, err
	}
	stops = append(stops, func() { emu.stop(5 * time.Second) })

	ours := &system{name: "fieldlink", ledger: newLedger("fieldlink", ourTopic, ourGateway, o.devices)}
	theirs := &system{name: "Node-RED", ledger: newLedger("Node-RED", theirTopic, theirGateway, o.devices)}
	systems := []*system{ours}
	if o.nodeRED {
		systems = append(systems, theirs)
	}
	ledgers := make([]*ledger, len(systems))
	for i, s := range systems {
		ledgers[i] = s.ledger
	}
	disconnect, err := subscribe(brokerAddr, ledgers...)
	if err != nil {
		return 2, false, err
	}
	stops = append(stops, disconnect)

	// The gateway.
	site := filepath.Join(tmp, "site.yaml")
	if err := os.WriteFile(site, []byte(siteYAML(profiles, emuAddr, brokerAddr, filepath.Join(tmp, "buffer.db"), o.devices, o.interval)), 0o644); err != nil {
		return 2, false, err
	}
	if ours.proc, err = start("gateway", filepath.Join(tmp, "gateway.log"), tmp, nil, gw, "run", "-c", site, "-log-level", "warn"); err != nil {
		return 2, false, err
	}
	stops = append(stops, func() { ours.proc.stop(10 * time.Second) })
	ours.sampler = startSampler(ours.proc.pid(), time.Second)
	if st, err := os.Stat(gw); err == nil {
		ours.install = st.Size()
		ours.detail = fmt.Sprintf("one static binary, %s %s", runtime.GOOS, runtime.GOARCH)
	}

	// Node-RED, at the same time.
	if o.nodeRED {
		userDir := filepath.Join(tmp, "node-red")
		if err := os.MkdirAll(userDir, 0o755); err != nil {
			return 2, false, err
		}
		host, port, _ := strings.Cut(emuAddr, ":")
		eport, _ := strconv.Atoi(port)
		bhost, bp, _ := strings.Cut(brokerAddr, ":")
		bport, _ := strconv.Atoi(bp)
		flows, err := flowsJSON(host, eport, bhost, bport, o.devices, o.interval, newEpoch())
		if err != nil {
			return 2, false, err
		}
		if err := os.WriteFile(filepath.Join(userDir, "flows.json"), flows, 0o644); err != nil {
			return 2, false, err
		}
		settings := filepath.Join(userDir, "settings.js")
		uiPort := 0
		if o.editor {
			if uiPort, err = freePort(); err != nil {
				return 2, false, err
			}
		}
		if err := os.WriteFile(settings, []byte(settingsJS("flows.json", uiPort)), 0o644); err != nil {
			return 2, false, err
		}
		node, err := exec.LookPath("node")
		if err != nil {
			return 2, false, errors.New("footprint: node not found: Node-RED needs Node.js 20")
		}
		theirs.proc, err = start("node-red", filepath.Join(tmp, "node-red.log"), userDir, []string{"NODE_ENV=production"},
			node, red, "--settings", settings, "--userDir", userDir)
		if err != nil {
			return 2, false, err
		}
		stops = append(stops, func() { theirs.proc.stop(10 * time.Second) })
		theirs.sampler = startSampler(theirs.proc.pid(), time.Second)
		theirs.install = treeBytes(filepath.Join(o.cache, "node_modules"))
		nodeBin, _ := filepath.EvalSymlinks(node)
		if st, err := os.Stat(nodeBin); err == nil {
			theirs.install += st.Size()
		}
		v, _ := exec.Command(node, "--version").Output()
		theirs.detail = fmt.Sprintf("node %s binary + node_modules (node-red 4.1.15, node-red-contrib-modbus 5.23.3)", strings.TrimSpace(string(v)))
		if o.editor {
			theirs.name = "Node-RED (with editor)"
			fmt.Fprintf(out, "Node-RED editor on http://127.0.0.1:%d/\n", uiPort)
		}
	}

	// Wait until both deliver, warm up, measure the same window.
	fmt.Fprintf(out, "waiting for the first packets (gateway, Node-RED) ...\n")
	for _, s := range systems {
		if err := waitFirst(ctx, s, o.startTimeout); err != nil {
			return 2, false, err
		}
	}
	fmt.Fprintf(out, "both deliver; %s warm-up, then a %s window ...\n", o.warmup, o.duration)
	if err := sleep(ctx, o.warmup, systems); err != nil {
		return 2, false, err
	}
	for _, s := range systems {
		if s.w0, err = s.sampler.sample(); err != nil {
			return 2, false, fmt.Errorf("footprint: %s: %w", s.name, err)
		}
	}
	if err := sleep(ctx, o.duration, systems); err != nil {
		return 2, false, err
	}
	for _, s := range systems {
		if s.w1, err = s.sampler.sample(); err != nil {
			return 2, false, fmt.Errorf("footprint: %s: %w", s.name, err)
		}
	}
	for _, s := range systems {
		s.samples = s.sampler.Stop()
	}
	if o.csv != "" {
		if err := writeSamples(o.csv, systems); err != nil {
			return 2, false, err
		}
	}
	code, broken = report(o, root, ours, theirs, out)
	return code, broken, nil
}

// writeSamples writes every sample of every system as CSV.
func writeSamples(path string, systems []*system) error {
	var b strings.Builder
	b.WriteString("system,seconds,window,rss_bytes,anon_bytes,file_bytes,cpu_seconds\n")
	for _, s := range systems {
		for _, u := range s.samples {
			in := !u.At.Before(s.w0.At) && !u.At.After(s.w1.At)
			fmt.Fprintf(&b, "%s,%.1f,%t,%d,%d,%d,%.2f\n", s.name, u.At.Sub(s.samples[0].At).Seconds(), in, u.RSS, u.Anon, u.File, u.CPU.Seconds())
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
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

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", a/b)
}

// report prints the table and returns the exit code of the checks, and
// whether a system did not work (too few packets, wrong shapes).
func report(o options, root string, ours, theirs *system, out io.Writer) (code int, broken bool) {
	expected := o.devices * int(o.duration/o.interval)
	of := ours.figures()
	var tf figures
	both := o.nodeRED
	if both {
		tf = theirs.figures()
	}
	perK := func(f figures) float64 {
		if f.packets == 0 {
			return 0
		}
		return f.cpu.Seconds() / float64(f.packets) * 1000
	}

	fmt.Fprintf(out, "\n== footprint: %d devices x %d registers at %s, Modbus TCP -> MQTT QoS 1, %s window (%s warm-up), %d cores, %s ==\n",
		o.devices, len(registers), o.interval, o.duration, o.warmup, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02T15:04Z"))
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label, a, b, r string) {
		if !both && label != "" {
			b, r = "-", "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t\n", label, a, b, r)
	}
	row("", "fieldlink", theirs.name, "ours/theirs")
	row("resident median, MB", mb(of.rssMedian), mb(tf.rssMedian), ratio(float64(of.rssMedian), float64(tf.rssMedian)))
	row("  of which anonymous (heap, stacks)", mb(of.anonMedian), mb(tf.anonMedian), ratio(float64(of.anonMedian), float64(tf.anonMedian)))
	row("  of which file-backed (code, mmap)", mb(of.fileMedian), mb(tf.fileMedian), ratio(float64(of.fileMedian), float64(tf.fileMedian)))
	row("resident max (from start), MB", mb(of.rssMax), mb(tf.rssMax), ratio(float64(of.rssMax), float64(tf.rssMax)))
	row("peak resident (VmHWM), MB", mb(of.hwm), mb(tf.hwm), ratio(float64(of.hwm), float64(tf.hwm)))
	row("CPU s in the window", fmt.Sprintf("%.2f", of.cpu.Seconds()), fmt.Sprintf("%.2f", tf.cpu.Seconds()), ratio(of.cpu.Seconds(), tf.cpu.Seconds()))
	row("CPU s per 1,000 packets", fmt.Sprintf("%.3f", perK(of)), fmt.Sprintf("%.3f", perK(tf)), ratio(perK(of), perK(tf)))
	row("CPU s before the window (start-up, warm-up)", fmt.Sprintf("%.2f", of.before.Seconds()), fmt.Sprintf("%.2f", tf.before.Seconds()), ratio(of.before.Seconds(), tf.before.Seconds()))
	row(fmt.Sprintf("packets delivered (expected %d)", expected), strconv.Itoa(of.packets), strconv.Itoa(tf.packets), ratio(float64(of.packets), float64(tf.packets)))
	row("install size, MB", mb(ours.install), mb(theirs.install), ratio(float64(ours.install), float64(theirs.install)))
	_ = w.Flush()
	fmt.Fprintf(out, "(MB = 10^6 bytes; resident = VmRSS of the process tree, sampled every second; CPU = utime+stime)\n")
	if both {
		fmt.Fprintf(out, "install size: fieldlink = %s; Node-RED = %s\n", ours.detail, theirs.detail)
	}
	printDist(out, filepath.Join(root, o.dist))

	fail := func(format string, a ...any) {
		fmt.Fprintf(out, "FAIL: "+format+"\n", a...)
	}
	failed := false
	if float64(of.rssMax) >= o.maxRSS*1e6 {
		fail("gateway resident max %s MB, target under %g MB", mb(of.rssMax), o.maxRSS)
		failed = true
	}
	if both {
		for _, c := range []struct {
			what   string
			a, b   int64
			target float64
		}{{"median", of.rssMedian, tf.rssMedian, o.maxRatio}, {"max", of.rssMax, tf.rssMax, o.maxRatio}} {
			if c.b == 0 || float64(c.a)/float64(c.b) >= c.target {
				fail("resident %s ours/theirs %s, target under %g", c.what, ratio(float64(c.a), float64(c.b)), c.target)
				failed = true
			}
		}
	}
	check := func(s *system, f figures) {
		if float64(f.packets) < o.minDelivery*float64(expected) {
			fail("%s delivered %d packets in the window, expected %d (at least %.0f%%)", s.name, f.packets, expected, o.minDelivery*100)
			failed, broken = true, true
		}
		if f.devs < o.devices {
			fail("%s delivered from %d of %d devices", s.name, f.devs, o.devices)
			failed, broken = true, true
		}
		n, ex := s.ledger.issues()
		if n > 0 {
			fail("%s: %d packets of the wrong shape, e.g. %s", s.name, n, strings.Join(ex, "; "))
			failed, broken = true, true
		}
		if f.dups > 0 {
			fmt.Fprintf(out, "note: %s: %d duplicate deliveries in the window (at-least-once)\n", s.name, f.dups)
		}
		if p := s.ledger.sample(); p != nil {
			fmt.Fprintf(out, "%s packet: %s\n", s.name, p)
		}
	}
	check(ours, of)
	if both {
		check(theirs, tf)
	}
	if failed {
		return 1, broken
	}
	fmt.Fprintf(out, "ok: gateway resident max %s MB (target < %g MB)", mb(of.rssMax), o.maxRSS)
	if both {
		fmt.Fprintf(out, ", %s of Node-RED's median and %s of its max (target < %g)",
			ratio(float64(of.rssMedian), float64(tf.rssMedian)), ratio(float64(of.rssMax), float64(tf.rssMax)), o.maxRatio)
	}
	fmt.Fprintln(out)
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
