package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/buffer"
	"fieldlink/config"
	"fieldlink/downlink"
	"fieldlink/internal/signing"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/status"
	"fieldlink/uplink"
)

// commandErrors tell the engine what a Modbus write error means.
var commandErrors = downlink.Errors{
	Refused: func(err error) bool {
		var e *gm.ModbusError
		return errors.As(err, &e)
	},
	NotSent: func(err error) bool { return errors.Is(err, modbus.ErrNotSent) },
}

// resultTimeout bounds publishing one result.
const resultTimeout = 10 * time.Second

// livePoints is the sensors side in force, whichever a reload made it.
type livePoints struct{ g *Agent }

func (s livePoints) Write(ctx context.Context, device, point string, v float64) (sensors.WriteResult, error) {
	return s.g.Sensors().Write(ctx, device, point, v)
}

func (s livePoints) Latest(device, point string, now time.Time) (sensors.Reading, bool) {
	return s.g.Sensors().Latest(device, point, now)
}

// startDownlink opens the command ledger in the buffer file, the engine
// that runs commands and the control socket of gateway write. The uplink
// subscribes to the command topic when the downlink is enabled.
func (g *Agent) startDownlink(c *config.Config) error {
	ledger, err := downlink.OpenLedger(g.q, downlink.LedgerOptions{})
	if err != nil {
		return fmt.Errorf("downlink: %w", err)
	}
	g.commands = downlink.NewEngine(c, downlink.Options{
		Points: livePoints{g}, Ledger: ledger, Errors: commandErrors,
		Emit: g.emitCommand, Publish: g.publishResult,
		Log: g.log.With("component", "downlink"),
	})
	if err := g.configureDownlink(c); err != nil {
		return err
	}
	stop, err := serveControl(ControlPath(c), g.commands, g.q, g.log.With("component", "control"))
	if err != nil {
		// gateway write then goes straight to the bus, which the daemon
		// holds: say why it cannot.
		g.log.Error("gateway write cannot reach this daemon", "err", err)
		stop = func() {}
	}
	g.stopControl = stop
	return nil
}

// configureDownlink applies c's writable points and keys to the engine.
func (g *Agent) configureDownlink(c *config.Config) error {
	paths := make([]string, len(c.Downlink.Keys))
	for i, k := range c.Downlink.Keys {
		paths[i] = c.Rel(k)
	}
	keys, err := signing.LoadPublicKeys(paths)
	if err != nil {
		return fmt.Errorf("downlink.keys: %w", err)
	}
	g.commands.Configure(c, keys)
	if unsigned(c) {
		// At every start and reload: gateway check let it through only
		// because the site file says so.
		g.log.Warn("downlink runs unsigned commands: anyone who can publish on its topic can write to the devices (downlink.allow_unsigned: true); give downlink.keys",
			"topic", c.Downlink.Topic)
	}
	return nil
}

// unsigned reports whether c's downlink runs commands without a
// signature.
func unsigned(c *config.Config) bool { return c.Downlink.Enabled && len(c.Downlink.Keys) == 0 }

// subscriptions are what every MQTT upstream subscribes to: the
// downlink's commands when it is enabled, and requests for an early pull
// of the remote configuration.
func (g *Agent) subscriptions(c *config.Config) []uplink.Subscription {
	var subs []uplink.Subscription
	if g.commands != nil && c.Downlink.Enabled {
		sub := uplink.Subscription{Topic: c.Downlink.Topic, MaxSize: downlink.MaxCommandSize, Handle: func(payload []byte) {
			g.commands.Handle(context.Background(), payload)
		}}
		if len(c.Downlink.Keys) > 0 {
			// Signed commands wait apart from any flood of others.
			sub.Admit = g.commands.Admit
		}
		subs = append(subs, sub)
	}
	if c.RemoteConfig != nil {
		subs = append(subs, uplink.Subscription{Topic: c.RemoteConfig.PullTopic, Handle: func([]byte) {
			if m := g.remote.Load(); m != nil {
				m.PullNow()
			}
		}})
	}
	return subs
}

// sparkplug is what Sparkplug B upstreams ask of the gateway: their DCMDs
// run through the downlink's engine (see sparkplugCommands), and the
// devices' health, for DDEATH and DBIRTH.
func (g *Agent) sparkplug() sparkplugHooks {
	return sparkplugHooks{
		command: sparkplugCommands(g.Commands, func() bool { return g.Config().Downlink.Enabled }, g.log.With("component", "downlink")),
		online:  func() map[string]bool { return sparkplugOnline(g.Sensors().Status()) },
	}
}

// emitCommand stores a command's record like a polled packet.
func (g *Agent) emitCommand(p *packet.Packet) {
	g.Sensors().Stamp(p)
	g.emit(p, nil)
}

// publishResult sends a result on every connected MQTT upstream.
func (g *Agent) publishResult(r downlink.Result) {
	up := g.cur.Load().up
	if up == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resultTimeout)
	defer cancel()
	c := g.Config()
	topic, err := uplink.ExpandTopic(c.Downlink.ResultTopic, topicVars(c))
	if err != nil {
		g.log.Error("command result not published: downlink.result_topic", "err", err)
		return
	}
	if n, err := up.pool.PublishAll(ctx, topic, r.JSON(), false); n == 0 {
		g.log.Warn("command result not published: no MQTT upstream took it (the Command packet in the buffer still carries it)", "id", r.ID, "err", err)
	}
}

// Commands is the downlink's engine; nil when the downlink is off.
func (g *Agent) Commands() *downlink.Engine { return g.commands }

// Write runs a command given on the gateway itself (gateway write): through
// the running daemon's control socket, so that it takes its turn on the bus
// the daemon polls, or, when no daemon runs, straight to the bus with the
// buffer file's ledger and audit, its record left in the buffer for the
// daemon to deliver.
func Write(ctx context.Context, c *config.Config, cmd downlink.Command, log *slog.Logger) (downlink.Result, error) {
	res, err := SendCommand(ctx, ControlPath(c), cmd)
	if !errors.Is(err, ErrNoDaemon) {
		return res, err
	}
	q, adopt, err := openBuffer(c, log)
	if errors.Is(err, buffer.ErrLocked) {
		return downlink.Result{}, fmt.Errorf("%w: a daemon holds the buffer but its control socket %s does not answer (see its log)", err, ControlPath(c))
	}
	if err != nil {
		return downlink.Result{}, err
	}
	defer func() {
		// Run as root, what the buffer made meanwhile goes to the
		// service's owner too.
		q.Close()
		if err := adopt(); err != nil {
			log.Error("gateway write: the buffer's files stay root's", "err", err)
		}
	}()
	sens, err := OpenSensors(c, log)
	if err != nil {
		return downlink.Result{}, err
	}
	defer sens.Close()
	return writeOnce(ctx, c, q, sens, cmd, log)
}

// writeOnce runs one local command on a site that is not running, with the
// buffer file's ledger.
func writeOnce(ctx context.Context, c *config.Config, q *buffer.Buffer, sens *Sensors, cmd downlink.Command, log *slog.Logger) (downlink.Result, error) {
	ledger, err := downlink.OpenLedger(q, downlink.LedgerOptions{})
	if err != nil {
		return downlink.Result{}, fmt.Errorf("downlink: %w", err)
	}
	// Issued now, after the ledger opened: a ledger opened for the first
	// time vouches only for commands issued since.
	cmd.IssuedAt = downlink.NewTimestamp(time.Now())
	var stored error
	e := downlink.NewEngine(c, downlink.Options{
		Points: sens, Ledger: ledger, Errors: commandErrors, Log: log,
		Emit: func(p *packet.Packet) {
			sens.Stamp(p)
			_, stored = q.Append(ctx, p)
		},
	})
	res := e.RunLocal(ctx, cmd)
	if stored != nil {
		log.Error("the command's record was not stored in the buffer", "err", stored)
	}
	return res, nil
}

// commandWords is what a command asked, as far as it is known: "Open =
// true (cmd-42)"; its id alone when its point could not be read; "" when
// nothing of it could.
func commandWords(r downlink.Recent) string {
	var parts []string
	if r.Point != "" {
		parts = append(parts, r.Point+" = "+r.Value.String())
	}
	if r.ID != "" {
		parts = append(parts, "("+r.ID+")")
	}
	return strings.Join(parts, " ")
}

// downlinkStatus is the downlink as the status page shows it: newest
// command first.
func downlinkStatus(c *config.Config, e *downlink.Engine) status.DownlinkStatus {
	st := status.DownlinkStatus{Enabled: c.Downlink.Enabled, Unsigned: unsigned(c)}
	recent := e.Recent()
	for i := len(recent) - 1; i >= 0; i-- {
		r := recent[i]
		result := string(r.Status)
		if r.Reason != "" {
			result += ": " + r.Reason
		}
		st.Commands = append(st.Commands, status.DownlinkCommand{At: r.At, Device: r.Device, Command: commandWords(r), OK: r.Status == downlink.StatusDone, Result: result})
	}
	return st
}
