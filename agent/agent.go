package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/buffer"
	"fieldlink/buffer/cardstore"
	"fieldlink/config"
	"fieldlink/downlink"
	"fieldlink/exception"
	"fieldlink/fleet"
	"fieldlink/internal/kclock"
	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/status"
	"fieldlink/uplink"
)

// Options configures an [Agent]; the zero value is valid.
type Options struct {
	// Logger; nil discards.
	Logger *slog.Logger
	// OnPolled, if set, sees every packet as it is polled, before the
	// buffer. It is called one packet at a time, from the pollers.
	OnPolled func(*packet.Packet)
	// OnPacket, if set, sees every packet once it is safe: stored in the
	// buffer (with its Seq) when the site has an uplink, as polled when it
	// has none. It is called one packet at a time.
	OnPacket func(*packet.Packet)
	// OpenSensors opens a site's sensors side; nil means [OpenSensors]. Tests
	// replace it to make a bus fail to open.
	OpenSensors func(*config.Config, *slog.Logger) (*Sensors, error)
	// ClockSynced reports whether the wall clock is synchronised; packets
	// read while it is not are marked "ClockUnsynced" (see
	// [packet.Packet.ClockUnsynced]) and carry their monotonic reading for
	// the buffer's re-stamp. Nil means the kernel's NTP state.
	ClockSynced func() bool
	// Version is the gateway's version as the status page shows it; empty
	// means the module's build information.
	Version string
}

// Agent is one site's running gateway: the sensors side (buses and serial
// sensors, polling) feeding the buffer through an appender, and the uplink
// side (the selector, the upstreams and the delivery loop) draining it.
// A site file without an uplink polls into OnPacket alone.
//
// The buffer and the appender stay open for the gateway's life; a reload
// swaps the sensors side, the uplink side or both, so it loses no packet:
// the polls in progress finish into the appender, and what the delivery
// loop had leased goes back to the buffer for the next uplink side.
//
// Readers ([Agent.Sources], [Agent.Config], ...) never wait for a
// reload: they see the parts in force through one atomic pointer, which a
// reload swaps before it stops the old parts.
type Agent struct {
	log *slog.Logger
	opt Options
	q   *cardstore.Store // the card's buffer and the volatile one; nil without an uplink
	in  *buffer.Appender // nil without an uplink

	stopRetry context.CancelFunc // ends q's retries of a failed card
	retryDone chan struct{}

	cur atomic.Pointer[parts]

	mu          sync.Mutex // one reload, or Stop, at a time
	pollBase    context.Context
	stopAll     context.CancelFunc // ends polling for good (Stop, or a failed buffer)
	pollCancel  context.CancelFunc
	pollDone    chan struct{}
	secrets     [32]byte // config.UplinkDigest: the files and passwords the running uplink started with
	keys        [32]byte // config.KeysDigest of the file in force
	sensorsDown bool     // the running site has no open buses: a reload must rebuild them
	uplinkDown  bool     // the running uplink failed to start: a reload must rebuild it
	stopped     bool

	failed     chan struct{} // closed when the buffer fails for good
	failedOnce sync.Once

	commands     *downlink.Engine // nil without a buffer (no uplink)
	fleetReport  atomic.Pointer[fleet.Report]
	remote       atomic.Pointer[fleet.Manager] // nil without remote_config
	stopRemote   func()                        // set once by StartRemote
	remoteOnce   sync.Once
	reporterOnce sync.Once
	reportKick   chan struct{}
	stopControl  func()      // the control socket of gateway write
	status       statusState // what the status page knows beyond the snapshots
	clock        kclock.Clock
	heldBack     atomic.Uint64 // polled packets report by exception held back
}

// parts are the gateway's parts in force; a reload replaces the value.
type parts struct {
	cfg     *config.Config
	sensors *Sensors
	up      *uplinkSide // nil without an uplink (or while it cannot start)
}

// Start opens c's buses, buffer and upstreams and starts polling and
// delivering. Stop ends it.
func Start(c *config.Config, opt Options) (*Agent, error) {
	g := &Agent{log: opt.Logger, opt: opt, failed: make(chan struct{}), status: statusState{started: time.Now()}}
	g.clock.Synced = opt.ClockSynced
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.opt.OpenSensors == nil {
		g.opt.OpenSensors = OpenSensors
	}
	sens, err := g.opt.OpenSensors(c, g.log)
	if err != nil {
		return nil, err
	}
	p := &parts{cfg: c, sensors: sens}
	g.keys = config.KeysDigest(c)
	if c.Uplink != nil {
		if g.q, err = openStore(c, g.log); err != nil {
			sens.Close()
			return nil, err
		}
		if g.q.Card() == nil {
			// A card that fails from the start: no command ledger to
			// keep a command from running twice, so none runs.
			g.log.Error("commands from the platform are refused until the gateway restarts on a card that works: their ledger is on the card")
		} else if err := g.startDownlink(c); err != nil {
			sens.Close()
			_ = g.q.Close()
			return nil, err
		}
		g.cur.Store(p) // the downlink's commands reach the site through it
		if p.up, err = startUplink(c, g.q, g.subscriptions(c), g.sparkplug(), g.log); err != nil {
			sens.Close()
			_ = g.q.Close()
			return nil, err
		}
		g.secrets = config.UplinkDigest(c)
		g.in = buffer.NewAppender(g.q, buffer.AppenderOptions{
			Logger: g.log.With("component", "buffer"), OnFatal: g.fail, OnStored: opt.OnPacket,
		})
		go g.in.Run()
		var rctx context.Context
		rctx, g.stopRetry = context.WithCancel(context.Background())
		g.retryDone = make(chan struct{})
		go func() { defer close(g.retryDone); g.q.Run(rctx) }()
	}
	g.cur.Store(p)
	g.status.loaded(c)
	g.pollBase, g.stopAll = context.WithCancel(context.Background())
	g.startPolling(sens)
	return g, nil
}

// fail stops polling for good: the buffer failed (an fsync error), and only
// a restart can be trusted.
func (g *Agent) fail() {
	g.failedOnce.Do(func() { close(g.failed) })
	g.stopAll()
}

// Failed is closed when the buffer fails for good; [Agent.Fatal] says why.
func (g *Agent) Failed() <-chan struct{} { return g.failed }

// Fatal returns the buffer's fatal error, if it failed.
func (g *Agent) Fatal() error {
	if g.in == nil {
		return nil
	}
	return g.in.Fatal()
}

// emit is where the pollers' packets go; x, the site's report by
// exception, decides which of them are stored (nil: every one). A packet
// it holds back never reaches the buffer, so it takes no Seq there.
func (g *Agent) emit(p *packet.Packet, x *exception.Filter) {
	if !p.At.IsZero() {
		p.ClockUnsynced, p.Mono = g.clock.Unsynced(p.At)
	}
	if g.opt.OnPolled != nil {
		g.opt.OnPolled(p)
	}
	if !x.Keep(p) {
		g.heldBack.Add(1)
		return
	}
	if g.in != nil {
		g.in.Put(p)
	} else if g.opt.OnPacket != nil {
		g.opt.OnPacket(p)
	}
}

// startPolling polls sens until stopPolling; g.mu is held or the gateway
// is starting.
func (g *Agent) startPolling(sens *Sensors) {
	ctx, cancel := context.WithCancel(g.pollBase)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sens.Run(ctx, func(p *packet.Packet) { g.emit(p, sens.reportByException) })
	}()
	g.pollCancel, g.pollDone = cancel, done
}

// stopPolling ends the polls (each poll in progress ends at its next
// request) and waits; the site's ports stay open.
func (g *Agent) stopPolling() {
	if g.pollCancel != nil {
		g.pollCancel()
		<-g.pollDone
		g.pollCancel = nil
	}
}

// StopPolling ends polling and waits for the polls in progress; delivery
// goes on until Stop. The demo uses it to drain before it stops.
func (g *Agent) StopPolling() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopAll()
	g.stopPolling()
}

// Stop ends polling, stores the packets polled so far, ends delivery (what
// was in flight is acked or back in the buffer), disconnects the upstreams
// and closes the buffer and the ports. It returns the buffer's fatal
// error, if it failed.
func (g *Agent) Stop() error {
	// The remote configuration's manager first, outside g.mu: a reload of
	// its own takes it.
	g.remoteOnce.Do(func() {
		if g.stopRemote != nil {
			g.stopRemote()
		}
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return g.Fatal()
	}
	g.stopped = true
	g.stopAll()
	g.stopPolling()
	p := g.cur.Load()
	// Commands end first (the control socket, then the upstreams that
	// bring them), so that each leaves its record in the buffer.
	if g.stopControl != nil {
		g.stopControl()
	}
	if p.up != nil {
		p.up.stop()
	}
	if g.in != nil {
		g.in.Close()
	}
	p.sensors.Close()
	if g.q != nil {
		g.stopRetry()
		<-g.retryDone
		_ = g.q.Close()
	}
	return g.Fatal()
}

// HeldBack is how many polled packets report by exception kept from the
// buffer since the start.
func (g *Agent) HeldBack() uint64 { return g.heldBack.Load() }

// Config is the site file in force.
func (g *Agent) Config() *config.Config { return g.cur.Load().cfg }

// Sensors is the sensors side in force.
func (g *Agent) Sensors() *Sensors { return g.cur.Load().sensors }

// Buffer is the gateway's buffer: the card's, with its volatile fallback
// while the card fails; nil without an uplink.
func (g *Agent) Buffer() *cardstore.Store { return g.q }

// Counts are the packets the appender stored and could not store.
func (g *Agent) Counts() (stored, failed uint64) {
	if g.in == nil {
		return 0, 0
	}
	return g.in.Stored(), g.in.Failed()
}

// Delivery returns the delivery loop's counters; ok is false without an
// uplink.
func (g *Agent) Delivery() (uplink.DeliveryStats, bool) {
	if up := g.cur.Load().up; up != nil {
		return up.delivery.Stats(), true
	}
	return uplink.DeliveryStats{}, false
}

// Upstreams returns the selector table's statistics of every upstream.
func (g *Agent) Upstreams() []selector.Stats {
	if up := g.cur.Load().up; up != nil {
		return up.table.Snapshot()
	}
	return nil
}

// Sources are the gateway's figures for the metrics and health endpoints.
func (g *Agent) Sources() status.Sources {
	src := status.Sources{
		Devices:         func() []sensors.DeviceStatus { return g.Sensors().Status() },
		Buses:           func() []sensors.BusSample { return g.Sensors().BusSamples() },
		Modbus:          func() map[string]modbus.Stats { return g.Sensors().ModbusStats() },
		Readings:        func(now time.Time) []sensors.Reading { return g.Sensors().Readings(now) },
		MetricsReadings: g.Config().Metrics.Readings,
		Ready: func() (bool, string) {
			if err := g.Fatal(); err != nil {
				return false, "buffer failed: " + err.Error()
			}
			return sensors.DevicesAnswering(g.Sensors().Status())
		},
	}
	g.statusSources(&src)
	src.HeldBack = g.HeldBack
	if g.q == nil {
		return src
	}
	src.Buffer = g.q.Stats
	src.Durability = g.q.State
	src.Remote = g.remoteState
	if e := g.commands; e != nil {
		src.Downlink = func() status.DownlinkStatus { return downlinkStatus(g.Config(), e) }
		src.Commands = func() map[string]uint64 {
			out := map[string]uint64{}
			for st, n := range e.Counts() {
				out[string(st)] = n
			}
			return out
		}
	}
	src.Delivery = g.Delivery
	src.Upstreams = g.Upstreams
	src.Selector = func() string { return g.Config().Uplink.Selector }
	src.SelectorFallbacks = func() uint64 {
		if up := g.cur.Load().up; up != nil {
			if f, ok := up.strat.(interface{ Fallbacks() uint64 }); ok {
				return f.Fallbacks()
			}
		}
		return 0
	}
	return src
}

// ErrRestartNeeded is returned by Reload for a change that only a restart
// can apply.
var ErrRestartNeeded = errors.New("a restart is needed to apply it (systemctl restart fieldlink)")

// Reload applies a new site file: the sensors side is rebuilt if anything
// it polls changed, the uplink side if the uplink changed, or a file it
// names (password, token, headers, TLS) reads otherwise than when the
// running uplink started. A change that only a restart can apply, or buses that cannot
// open, is refused with the reason and the running configuration stays in
// force, whole.
//
// A reload can always restore polling: if the new buses fail and the old
// ones cannot reopen either, the gateway polls nothing until the next
// reload, which then rebuilds the sensors side even from an unchanged file.
func (g *Agent) Reload(c *config.Config) (err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return errors.New("gateway stopped")
	}
	defer func() { g.status.reloaded(g.Config(), err) }()
	log := g.log.With("component", "reload")
	old := g.cur.Load()
	d := config.Diff(old.cfg, c)
	if len(d.Restart) > 0 {
		return fmt.Errorf("%w; changed: %s", ErrRestartNeeded, strings.Join(d.Restart, ", "))
	}
	// The downlink's keys are read first: a reload that cannot read them
	// changes nothing.
	if g.commands != nil {
		if err := g.configureDownlink(c); err != nil {
			return err
		}
	}
	doSensors := d.Sensors || g.sensorsDown
	// The files the site file names count as much as the file itself: a
	// token or certificate corrected in place rebuilds the uplink.
	doUplink := g.q != nil && (d.Uplink || g.uplinkDown || config.UplinkDigest(c) != g.secrets)
	if !doSensors && !doUplink {
		g.cur.Store(&parts{cfg: c, sensors: old.sensors, up: old.up})
		if keys := config.KeysDigest(c); keys != g.keys {
			// Read again above (the downlink's) and by the remote
			// configuration's manager when this returns.
			g.keys = keys
			log.Info("site file unchanged in effect but for its key files, which are read again")
			return nil
		}
		log.Info("site file unchanged in effect; nothing to do")
		return nil
	}
	next := &parts{cfg: c, sensors: old.sensors, up: old.up}
	if doSensors {
		// The new site may open the same serial ports: close the old one
		// first, and reopen it if the new one cannot open.
		g.stopPolling()
		old.sensors.Close()
		s, err := g.opt.OpenSensors(c, g.log)
		if err != nil {
			log.Error("site file refused: its buses cannot open; the running configuration stays in force", "err", err)
			back, err2 := g.opt.OpenSensors(old.cfg, g.log)
			if err2 != nil {
				log.Error("the running buses cannot reopen either; polling stops until the next reload", "err", err2)
				back = &Sensors{Poller: sensors.NewPoller(&packet.Stamper{}, nil, nil), cfg: old.cfg}
				g.sensorsDown = true
			} else {
				g.sensorsDown = false
			}
			g.cur.Store(&parts{cfg: old.cfg, sensors: back, up: old.up})
			g.startPolling(back)
			return fmt.Errorf("buses cannot open: %w", err)
		}
		g.sensorsDown = false
		next.sensors = s
		g.cur.Store(next)
		g.startPolling(s)
	}
	if doUplink {
		// Readers see the new parts at once; the old uplink stops outside
		// their way, then the new one starts on the buffer it released.
		next.up = nil
		g.cur.Store(next)
		if old.up != nil {
			old.up.stop()
		}
		up, err := startUplink(c, g.q, g.subscriptions(c), g.sparkplug(), g.log)
		if err != nil {
			log.Error("new uplink cannot start; the previous uplink is restored", "err", err)
			if up, err = startUplink(old.cfg, g.q, g.subscriptions(old.cfg), g.sparkplug(), g.log); err != nil {
				log.Error("the previous uplink cannot restart either; packets wait in the buffer until the next reload", "err", err)
			}
			// What runs is the old uplink (or none): keep the old uplink
			// settings in force, so that the next reload compares with them.
			next = &parts{cfg: mixed(old.cfg, c), sensors: next.sensors, up: up}
			g.uplinkDown = true // the next reload rebuilds it, even from this file
			g.cur.Store(next)
			return fmt.Errorf("uplink cannot start: %w", err)
		}
		g.uplinkDown = false
		g.secrets = config.UplinkDigest(c)
		next.up = up
		g.cur.Store(next)
	}
	g.keys = config.KeysDigest(c)
	attrs := []any{"devices", c.DeviceCount(), "sensors", doSensors, "uplink", doUplink}
	if c.Uplink != nil {
		attrs = append(attrs, "upstreams", len(c.Uplink.Upstreams), "selector", c.Uplink.Selector)
	}
	log.Info("site file reloaded", attrs...)
	return nil
}

// mixed is c with the uplink of old: what runs after a reload whose new
// sensors side started and whose new uplink did not.
func mixed(old, c *config.Config) *config.Config {
	m := *c
	m.Uplink = old.Uplink
	return &m
}
