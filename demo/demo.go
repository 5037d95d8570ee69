// Package demo is `gateway demo`: the gateway's real pipeline on one
// machine with no hardware and no setup. Two sites (a farm and a mine) of
// emulated Modbus devices, each run by the same [fieldlink/agent.Agent] as
// `gateway run`, deliver to three embedded MQTT brokers of different speeds
// behind relays that the demo's story takes down and brings back; a live
// view shows the selector at work, and a ledger behind the brokers checks at
// the end that no packet was lost.
package demo

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/agent"
	"fieldlink/config"
	"fieldlink/downlink"
	"fieldlink/packet"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
	"fieldlink/uplink"
)

// The demo's two sites; {{ADDR}} stands for the emulator's address,
// {{BROKER1}}…{{BROKER3}} for the brokers' and {{DIR}} for the run's
// temporary directory.
var (
	//go:embed demo-farm.yaml
	demoFarmSite string
	//go:embed demo-mine.yaml
	demoMineSite string
)

// demoDevice is an emulated slave of the demo and how it misbehaves.
type demoDevice struct {
	slave   byte
	profile string
	faults  emulator.Faults
	spike   float64 // > 0: gas spikes this often per minute, to show alarms
}

var (
	demoFarm = []demoDevice{
		{1, "renke-rs-ws-n01", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{2, "generic-wind-speed", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{3, "renke-rs-fxjt-n01", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{4, "generic-tipping-bucket-rain", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{5, "sensecap-s-soil-mtec-02", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{6, "dfrobot-sen0644", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
		{7, "generic-irrigation-valve", emulator.Faults{Turnaround: 5 * time.Millisecond}, 0},
	}
	demoMine = []demoDevice{
		{1, "generic-mine-methane", emulator.Faults{Turnaround: 10 * time.Millisecond}, 1},
		// A flaky CO sensor: a quarter of its replies never come.
		{2, "jxct-jxbs-3001-co", emulator.Faults{Drop: 0.25, Turnaround: 10 * time.Millisecond}, 0},
		{3, "generic-mine-oxygen", emulator.Faults{Turnaround: 10 * time.Millisecond}, 0},
		// A corroded connector: some replies arrive with a bad CRC.
		{4, "generic-mine-h2s", emulator.Faults{BadCRC: 0.1, Turnaround: 10 * time.Millisecond}, 0},
		{5, "generic-mine-wind-speed", emulator.Faults{Turnaround: 10 * time.Millisecond}, 0},
	}
)

// startEmulator serves devs on a loopback port and returns its address.
func startEmulator(ctx context.Context, wg *sync.WaitGroup, set profile.Set, devs []demoDevice, rtu bool, seed int64) (string, error) {
	var eds []emulator.Device
	for _, d := range devs {
		p, ok := set[d.profile]
		if !ok {
			return "", fmt.Errorf("demo: profile %s missing", d.profile)
		}
		if d.spike > 0 {
			p = withSpike(p, d.spike)
		}
		eds = append(eds, emulator.Device{Slave: d.slave, Profile: p, Faults: d.faults})
	}
	emu, err := emulator.New(eds, emulator.Options{Seed: seed})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	wg.Go(func() {
		if rtu {
			_ = emu.ServeRTUOverTCP(ctx, ln)
		} else {
			_ = emu.ServeTCP(ctx, ln)
		}
	})
	return ln.Addr().String(), nil
}

// withSpike returns a copy of p whose gas readings spike often.
func withSpike(p *profile.Profile, spike float64) *profile.Profile {
	c := *p
	c.Registers = slices.Clone(p.Registers)
	for i := range c.Registers {
		if e := c.Registers[i].Emulate; e != nil && e.Model == "drift" {
			e2 := *e
			e2.Spike = spike
			c.Registers[i].Emulate = &e2
		}
	}
	return &c
}

// demoSite is one of the demo's gateways, the same [agent.Agent] that
// gateway run starts: pollers → buffer → delivery → upstreams.
type demoSite struct {
	kind     string // farm or mine
	cfg      *config.Config
	g        *agent.Agent
	produced atomic.Uint64 // packets polled
	// Packets and alarms by device, counted once stored, on the appender's
	// goroutine; read after the agent stopped.
	packets, alarms map[string]int
}

// demoRun is a running demo: its parts, its story so far, and what the live
// view remembers between ticks.
type demoRun struct {
	scr      *demoScreen
	start    time.Time
	duration time.Duration // 0: until interrupted
	brokers  []*demoBroker
	byURL    map[string]int // broker index by the upstream name the gateway gives it
	sites    []*demoSite
	ledger   *demoLedger

	mu       sync.Mutex
	events   []string // for the summary
	stopping bool

	commands int // sent so far; the scenario's goroutine's own

	// The view's goroutine's own.
	lastTick      time.Time
	lastDelivered []uint64
	lastLinks     []int // -1: not seen yet
	lastResults   int   // command results already told
}

// event tells what the demo does or sees, above the live view, and keeps it
// for the summary.
func (r *demoRun) event(format string, a ...any) {
	line := fmt.Sprintf("[%6s] ", demoSecs(time.Since(r.start))) + fmt.Sprintf(format, a...)
	r.mu.Lock()
	r.events = append(r.events, line)
	r.mu.Unlock()
	fmt.Fprintf(r.scr, "demo %s\n", line)
}

// demoStep is a moment of the demo's story.
type demoStep struct {
	at time.Duration // since the start
	do func()
}

// scenario is the story over period: broker-2 goes down for its middle
// third; in a longer run, the other two follow for a moment, so that no
// upstream is left and the buffer fills and then drains.
func (r *demoRun) scenario(period time.Duration) []demoStep {
	b1, b2, b3 := r.brokers[0], r.brokers[1], r.brokers[2]
	out, back := period/3, 2*period/3
	steps := []demoStep{{out, func() {
		b2.relay.down()
		r.event("outage: %s goes down for %v (listener closed, connections cut, new ones refused); its traffic fails over to %s and %s",
			b2.name, demoSecs(back-out), b1.name, b3.name)
	}}}
	if period >= 8*time.Second {
		at := period * 42 / 100
		d := min(max(period*8/100, time.Second), 3*time.Second)
		steps = append(steps, demoStep{at, func() {
			b1.relay.down()
			b3.relay.down()
			r.event("outage: %s and %s go down too, for %v: no upstream left, packets wait in the buffer", b1.name, b3.name, demoSecs(d))
		}}, demoStep{at + d, func() {
			if r.up(b1, b3) {
				r.event("%s and %s are back up: the gateway reconnects (after its backoff) and the buffer drains", b1.name, b3.name)
			}
		}})
	}
	// The platform opens the valve, through two brokers at once (it runs
	// once), and closes it again later.
	steps = append(steps,
		demoStep{period / 6, func() { r.command(true) }},
		demoStep{period * 6 / 10, func() { r.command(false) }})
	slices.SortStableFunc(steps, func(a, b demoStep) int { return int(a.at - b.at) })
	steps = append(steps, demoStep{back, func() {
		if r.up(b2) {
			r.event("%s is back up: the gateway reconnects after its backoff, which grew during the outage", b2.name)
		}
	}})
	return steps
}

// command publishes, as the platform, a command that opens or closes the
// farm's valve, through every broker that is up: the gateway runs it once.
// Commands are never queued, so a platform that sees no result (the
// gateway was reconnecting) sends the same command again, as platforms do:
// the id keeps it from running twice.
func (r *demoRun) command(open bool) {
	farm := r.sites[0]
	r.commands++
	cmd := downlink.Command{
		ID: fmt.Sprintf("demo-%d", r.commands), Device: "valve-1", Point: "ValveOpen", Value: downlink.Bool(open),
		IssuedAt: downlink.NewTimestamp(time.Now()), Actor: "platform:demo",
	}
	topic, err := uplink.ExpandTopic(farm.cfg.Downlink.Topic, map[string]string{"site": farm.cfg.Site.ID, "gateway": farm.cfg.Gateway.ID})
	if err != nil {
		r.event("cannot send a command: %v", err)
		return
	}
	what := "close"
	if open {
		what = "open"
	}
	for try := 1; try <= 4; try++ {
		var names []string
		for _, b := range r.brokers {
			if b.relay.isUp() && b.srv.publish(topic, cmd.JSON()) == nil {
				names = append(names, b.name)
			}
		}
		again := ""
		if try > 1 {
			again = " again, no result seen yet"
		}
		r.event("platform: %s valve-1 (command %s%s, sent through %s: it runs once)", what, cmd.ID, again, strings.Join(names, ", "))
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if e := farm.g.Commands(); e != nil {
				for _, res := range e.Recent() {
					if res.ID == cmd.ID {
						return
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// up brings brokers back; it reports whether all came.
func (r *demoRun) up(bs ...*demoBroker) bool {
	ok := true
	for _, b := range bs {
		if err := b.relay.up(); err != nil {
			r.event("%s cannot come back: %v", b.name, err)
			ok = false
		}
	}
	return ok
}

// play runs the steps at their times until ctx ends.
func (r *demoRun) play(ctx context.Context, steps []demoStep) {
	for _, st := range steps {
		t := time.NewTimer(time.Until(r.start.Add(st.at)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		st.do()
	}
}

// drained reports whether every buffered packet was delivered.
func (r *demoRun) drained() bool {
	for _, s := range r.sites {
		st, _ := s.g.Delivery()
		stored, failed := s.g.Counts()
		if stored+failed < s.produced.Load() || s.g.Store().Len() > 0 || st.Delivered+st.DeadLettered < stored {
			return false
		}
	}
	return true
}

// startStatusPage serves a site's status page on its metrics address, or,
// when that is busy (another gateway, another demo), on a free port.
func startStatusPage(s *demoSite, log *slog.Logger) (addr string, stop func(), err error) {
	addr, stop, err = agent.StartMetrics(s.cfg, s.g.Sources(), log)
	if err != nil {
		c := *s.cfg
		c.Metrics.Listen = "127.0.0.1:0"
		addr, stop, err = agent.StartMetrics(&c, s.g.Sources(), log)
	}
	return addr, stop, err
}

// demoDrain is how long the demo waits, once polling stopped, for the
// buffer to empty before it disconnects.
const demoDrain = 3 * time.Second

// Options configures [Run].
type Options struct {
	// Duration of the run; 0 runs until ctx ends.
	Duration time.Duration
	// Profiles are the firmware profiles the emulated devices and the
	// sites use.
	Profiles profile.Set
	// Logger makes the demo's logger, which writes to w (the screen, above
	// the live view); debug also shows the brokers' logs.
	Logger func(w io.Writer) *slog.Logger
	Debug  bool
}

// Run runs the demo: packets as JSON lines on stdout, the live view and
// the story on stderr, and a summary at the end. It returns an error if a
// packet was lost or a buffer failed.
func Run(ctx context.Context, opt Options, stdout, stderr io.Writer) error {
	duration := &opt.Duration
	scr := newDemoScreen(stdout, stderr)
	logTo, logFile := io.Writer(scr), ""
	if scr.live {
		f, err := os.CreateTemp("", "fieldlink-demo-*.log")
		if err != nil {
			return err
		}
		defer f.Close()
		logTo, logFile = demoLogs{scr, f}, f.Name()
	}
	log := opt.Logger(logTo)
	set := opt.Profiles
	dir, err := os.MkdirTemp("", "fieldlink-demo-")
	if err != nil {
		return err
	}
	// Undone in reverse order on return.
	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	undo = append(undo, func() { _ = os.RemoveAll(dir) })

	// bg outlives the run: emulators, brokers and uplinks stop only after
	// the final drain.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	undo = append(undo, func() { stopBg(); wg.Wait() })
	farm, err := startEmulator(bg, &wg, set, demoFarm, false, 1)
	if err != nil {
		return err
	}
	mine, err := startEmulator(bg, &wg, set, demoMine, true, 2)
	if err != nil {
		return err
	}

	r := &demoRun{scr: scr, duration: *duration, ledger: &demoLedger{}, byURL: map[string]int{}}
	brokerLog := slog.New(slog.DiscardHandler) // mochi is chatty about every client
	if opt.Debug {
		brokerLog = log.With("component", "broker")
	}
	vars := []string{"{{DIR}}", dir}
	for i, spec := range demoBrokers {
		b, err := startDemoBroker(bg, &wg, spec, r.ledger, brokerLog)
		if err != nil {
			return err
		}
		undo = append(undo, b.close)
		r.brokers = append(r.brokers, b)
		r.byURL[b.url()] = i
		vars = append(vars, fmt.Sprintf("{{BROKER%d}}", i+1), b.relay.addr)
	}

	fixed := func(string) (profile.Set, error) { return set, nil }
	for _, d := range []struct{ kind, file, tmpl, addr string }{
		{"farm", "demo-farm.yaml", demoFarmSite, farm},
		{"mine", "demo-mine.yaml", demoMineSite, mine},
	} {
		text := strings.NewReplacer(append(vars, "{{ADDR}}", d.addr)...).Replace(d.tmpl)
		cfg, err := config.Parse(d.file, []byte(text), fixed)
		if err != nil {
			return err
		}
		r.sites = append(r.sites, &demoSite{kind: d.kind, cfg: cfg, packets: map[string]int{}, alarms: map[string]int{}})
	}

	fmt.Fprintf(scr, "fieldlink demo: the gateway's real pipeline (pollers → buffer → selector → MQTT) on emulated devices and embedded brokers\n")
	for _, s := range r.sites {
		c := s.cfg
		fmt.Fprintf(scr, "  %s %s, gateway %s: %d devices on %s; buffer %s\n", s.kind, c.Site.ID, c.Gateway.ID, c.DeviceCount(), c.Buses[0].URL, c.Buffer.Path)
	}
	fmt.Fprintf(scr, "  the mine's CO sensor drops a quarter of its replies, its H2S sensor garbles some\n")
	for _, b := range r.brokers {
		fmt.Fprintf(scr, "  %s: %s, replies +%v late (a relay in front of %s), load report on %s\n", b.name, b.url(), b.delay, demoServerKind, b.loadTopic())
	}
	period := *duration
	if period <= 0 {
		period = 30 * time.Second
		fmt.Fprintf(scr, "packets on stdout, one JSON line each; running until Ctrl-C\n")
	} else {
		fmt.Fprintf(scr, "packets on stdout, one JSON line each; running for %v (-duration 0 runs until Ctrl-C)\n", *duration)
	}

	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	if *duration > 0 {
		var cancel context.CancelFunc
		pollCtx, cancel = context.WithTimeout(pollCtx, *duration)
		defer cancel()
	}
	r.start = time.Now()
	for _, s := range r.sites {
		enc := s.cfg.Packet.Values
		buf := make([]byte, 0, 1024)
		g, err := agent.Start(s.cfg, agent.Options{
			Logger:   log,
			OnPolled: func(*packet.Packet) { s.produced.Add(1) },
			OnPacket: func(p *packet.Packet) {
				s.packets[p.DeviceID]++
				if p.Alarm() {
					s.alarms[p.DeviceID]++
				}
				buf = append(p.AppendJSON(buf[:0], enc), '\n')
				scr.packet(buf)
			},
		})
		if err != nil {
			return err
		}
		s.g = g
		undo = append(undo, func() { _ = g.Stop() })
	}
	var pages []string
	for _, s := range r.sites {
		addr, stop, err := startStatusPage(s, log)
		if err != nil {
			pages = append(pages, s.kind+" not served ("+err.Error()+")")
			continue
		}
		undo = append(undo, stop)
		pages = append(pages, s.kind+" http://"+addr+"/")
	}
	fmt.Fprintf(scr, "status pages (readings, device health, buffer, brokers; /status.json beside): %s\n", strings.Join(pages, " · "))
	if logFile != "" {
		fmt.Fprintf(scr, "logs: %s (the latest line shows under the view)\n", logFile)
	}
	fmt.Fprintln(scr)
	r.lastTick = r.start
	r.lastDelivered = make([]uint64, len(r.brokers))
	r.lastLinks = slices.Repeat([]int{-1}, len(r.brokers))

	var scenario, view sync.WaitGroup
	scenario.Go(func() { r.play(pollCtx, r.scenario(period)) })
	viewCtx, stopView := context.WithCancel(bg)
	view.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-viewCtx.Done():
				return
			case now := <-t.C:
				r.tick(now)
			}
		}
	})
	var polling sync.WaitGroup
	for _, s := range r.sites {
		polling.Go(func() {
			select {
			case <-pollCtx.Done():
			case <-s.g.Failed():
			}
			s.g.StopPolling()
		})
	}
	polling.Wait()
	stopPolling()
	scenario.Wait()
	why := fmt.Sprintf("the -duration of %v is over", *duration)
	if ctx.Err() != nil {
		why = "interrupted"
	}

	// The final drain: every broker up, until the buffers are empty.
	var back []string
	for _, b := range r.brokers {
		if !b.relay.isUp() && b.relay.up() == nil {
			back = append(back, b.name)
		}
	}
	if len(back) > 0 {
		r.event("stopping: %s back up for the final delivery", strings.Join(back, ", "))
	}
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	deadline := time.Now().Add(demoDrain)
	t := time.NewTicker(20 * time.Millisecond)
	for !r.drained() && time.Now().Before(deadline) {
		<-t.C
	}
	t.Stop()
	stopView()
	view.Wait()
	r.tick(time.Now())
	scr.leave()
	fatal := make([]error, len(r.sites))
	var stopping sync.WaitGroup
	for i, s := range r.sites {
		stopping.Go(func() { fatal[i] = s.g.Stop() })
	}
	stopping.Wait()

	if err := r.summary(scr, why); err != nil {
		return err
	}
	for i, s := range r.sites {
		if fatal[i] != nil {
			return fmt.Errorf("%s buffer failed: %w", s.kind, fatal[i])
		}
	}
	return nil
}
