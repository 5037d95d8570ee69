package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"fieldlink/internal/testtool"
)

// binaries are the programs the steps run.
type binaries struct {
	gateway, base, emulator, mosquitto, red, node, telegraf string
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
	// The devices: `gateway emulate` is not in the field build, so they
	// come from a full build of the same tree.
	bin.emulator = filepath.Join(tmp, "emulator")
	build := exec.Command("go", "build", "-o", bin.emulator, "./cmd/gateway")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 2, false, fmt.Errorf("footprint: go build ./cmd/gateway for gateway emulate: %w", err)
	}
	if o.base != "" {
		if bin.base, err = filepath.Abs(o.base); err != nil {
			return 2, false, err
		}
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
			argv := []string{bin.emulator, "emulate", "--profiles-dir", profiles, "--listen", fmt.Sprintf("tcp://127.0.0.1:%d", port), "--log-level", "warn"}
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
	var base, tele, red *system
	if bin.base != "" {
		base = &system{name: "fieldlink (base)", ledger: newLedger("fieldlink (base)", baseTopic, baseGateway, st.devices, regs)}
		systems = append(systems, base)
	}
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
	startGateway := func(s *system, binary, gateway, topic, name string) error {
		site := filepath.Join(tmp, name+".yaml")
		if err := os.WriteFile(site, []byte(siteYAML(gateway, topic, profiles, profile, emuAddrs, brokerAddr, filepath.Join(tmp, name+".db"), st.devices, st.interval)), 0o644); err != nil {
			return err
		}
		if err := startSystem(s, nil, binary, "run", "-c", site, "-log-level", "warn"); err != nil {
			return err
		}
		if fi, err := os.Stat(binary); err == nil {
			s.install = fi.Size()
			s.detail = fmt.Sprintf("one static binary, %s %s", runtime.GOOS, runtime.GOARCH)
		}
		return nil
	}
	if err := startGateway(ours, bin.gateway, ourGateway, ourTopic, "site"); err != nil {
		return nil, err
	}
	// The earlier revision's gateway, at the same time, on the same devices.
	if base != nil {
		if err := startGateway(base, bin.base, baseGateway, baseTopic, "site-base"); err != nil {
			return nil, err
		}
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
		startRed := func(uiPort int) error {
			if err := os.WriteFile(settings, []byte(settingsJS("flows.json", uiPort)), 0o644); err != nil {
				return err
			}
			return startSystem(red, []string{"NODE_ENV=production"}, bin.node, bin.red, "--settings", settings, "--userDir", userDir)
		}
		uiPort := 0
		if o.editor {
			// The editor's port is told in the settings: when another
			// process took it first, Node-RED says so and exits, and
			// another port is tried.
			uiPort, err = testtool.FreshPort(func(port int) error {
				if err := startRed(port); err != nil {
					return err
				}
				return listeningOrTaken(red.proc, testtool.LoopbackAddr(port), 60*time.Second)
			})
		} else {
			err = startRed(0)
		}
		if err != nil {
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
