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
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"fieldlink/agent"
	"fieldlink/config"
	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

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
		fmt.Fprintf(scr, "packets on stdout, one JSON line each; running for %v (--for 0 runs until Ctrl-C)\n", *duration)
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
	why := fmt.Sprintf("the --for of %v is over", *duration)
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
