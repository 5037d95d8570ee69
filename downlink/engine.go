package downlink

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/config"
	"fieldlink/internal/yamlconf"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/profile"
)

// Engine defaults.
const (
	// WriteTimeout bounds one command on the bus: waiting for its turn,
	// the write and its read-back, retries included.
	WriteTimeout = 10 * time.Second
	// maxAttempts is how often an idempotent point is written when the
	// outcome stays unknown; other points are written once.
	maxAttempts = 3
	// futureSkew is how far ahead of the gateway's clock issued_at may be.
	futureSkew = 30 * time.Second
	// recentKept is how many results Recent remembers.
	recentKept = 20
	// commandDataType is the packets' DataType for the record of a command.
	commandDataType = "Command"
)

// Points are the sensors' points the engine writes through and reads
// interlocks from (the agent's sensors side in production).
type Points interface {
	Write(ctx context.Context, device, point string, v float64) (sensors.WriteResult, error)
	Latest(device, point string, now time.Time) (sensors.Reading, bool)
}

// Recorder keeps command ids and the audit log (a [Ledger] in production).
type Recorder interface {
	// Begin records cmd as running, or returns the result of the command
	// with the same id seen before (which must not run again).
	Begin(cmd Command, now time.Time) (*Result, error)
	// Finish records cmd's result and audits it.
	Finish(res Result) error
	// Refused audits a command refused before Begin (unparsable, badly
	// signed) without keeping its id; cmd is nil when it did not parse.
	Refused(cmd *Command, res Result) error
}

// Errors tells the engine what a failed write means; the modbus package
// gives the production predicates.
type Errors struct {
	// Refused: the device answered with an exception; nothing was written.
	Refused func(error) bool
	// NotSent: the request never reached the line.
	NotSent func(error) bool
}

// Options wire an Engine.
type Options struct {
	Points Points
	Ledger Recorder
	Errors Errors
	// Keys: when set, only commands signed by one of them run.
	Keys []ed25519.PublicKey
	// Emit hands the record of a command to the buffer, as a packet with
	// DataType Command; nil drops it.
	Emit func(*packet.Packet)
	// Publish sends a result to the platform; nil drops it.
	Publish func(Result)
	Now     func() time.Time
	Log     *slog.Logger
}

// Engine runs commands: it checks each against the site file's rules,
// runs it at most once through the bus's own schedule, settles its outcome
// by reading the point back, and reports it three ways: the result topic,
// the audit log and a Command packet in the buffer.
type Engine struct {
	opt    Options
	maxAge time.Duration
	run    sync.Mutex           // one command on the bus at a time; guards the settings
	points map[[2]string]*point // by device, point
	// devices are the site's device names, to tell a command for no
	// device from one for a point that is not writable.
	devices []string
	// site and gateway are this gateway's site.id and gateway.id: a
	// command for another is refused (see misdirected).
	site, gateway string
	// admission is what Admit checks against, set with the settings but
	// read without waiting for a command on the bus.
	admission atomic.Pointer[admission]

	mu     sync.Mutex
	counts map[Status]uint64
	recent []Recent
	// described is the writable points as Describe gives them, set with
	// points: Describe must not wait for a command on the bus, nor read
	// points while a reload replaces them.
	described string
}

// Recent is a command's result with what it was about, for the live
// views.
type Recent struct {
	Result
	Device, Point string
}

// NewEngine returns an engine for the writable points of c.
func NewEngine(c *config.Config, opt Options) *Engine {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{opt: opt, counts: map[Status]uint64{}}
	e.Configure(c, opt.Keys)
	return e
}

// Configure applies a site file's writable points, max_age and keys, for
// the next command (a reload).
func (e *Engine) Configure(c *config.Config, keys []ed25519.PublicKey) {
	points := map[[2]string]*point{}
	var devices []string
	for _, l := range c.SerialSensors {
		devices = append(devices, l.Name)
	}
	for _, b := range c.Buses {
		for _, d := range b.Devices {
			devices = append(devices, d.Name)
			p := c.Profiles[d.Profile]
			for _, w := range d.Writable {
				if reg, ok := p.Register(w.Point); ok && reg.Writable() {
					points[[2]string{d.Name, w.Point}] = &point{device: d.Name, reg: reg, rule: w}
				}
			}
		}
	}
	names := make([]string, 0, len(points))
	for k := range points {
		names = append(names, k[0]+"."+k[1])
	}
	slices.Sort(names)
	e.run.Lock()
	defer e.run.Unlock()
	e.points, e.devices, e.maxAge, e.opt.Keys = points, devices, c.Downlink.MaxAge, keys
	e.site, e.gateway = c.Site.ID, c.Gateway.ID
	e.admission.Store(&admission{keys: keys, site: c.Site.ID, gateway: c.Gateway.ID})
	e.mu.Lock()
	e.described = strings.Join(names, ", ")
	e.mu.Unlock()
}

// Handle runs one command as received (JSON) and returns its result, which
// it has already published, audited and buffered.
func (e *Engine) Handle(ctx context.Context, payload []byte) Result {
	now := e.opt.Now()
	cmd, err := ParseCommand(payload)
	if err != nil {
		// Without a valid command there is no id to keep: answer and log.
		res := Result{ID: idOf(payload), Status: StatusRejected, Reason: err.Error(), At: now}
		e.refused(nil, res, false)
		return res
	}
	return e.Run(ctx, cmd)
}

// Run runs a parsed command; see Handle.
func (e *Engine) Run(ctx context.Context, cmd Command) Result { return e.run1(ctx, cmd, false) }

// RunLocal runs a command given on the gateway itself (gateway write, by
// root): every rule of Run but the signature, which guards the network.
func (e *Engine) RunLocal(ctx context.Context, cmd Command) Result { return e.run1(ctx, cmd, true) }

func (e *Engine) run1(ctx context.Context, cmd Command, local bool) Result {
	e.run.Lock()
	defer e.run.Unlock()
	now := e.opt.Now()
	if err := cmd.check(); err != nil {
		// Built in code, not parsed (a parsed command passes): audited
		// without its fields, which the log could not read back.
		id := cmd.ID
		if checkID(id) != nil {
			id = ""
		}
		res := Result{ID: id, Status: StatusRejected, Reason: "command: " + err.Error(), At: now}
		e.refused(nil, res, false)
		return res
	}
	if len(e.opt.Keys) > 0 && !local {
		// Checked before the id is kept: a forged command must not take
		// the id of a real one.
		if err := cmd.Verify(e.opt.Keys); err != nil {
			res := Result{ID: cmd.ID, Status: StatusRejected, Reason: err.Error(), Value: cmd.Value, At: now}
			e.refused(&cmd, res, false) // no packet: forgeries must not fill the buffer
			return res
		}
	}
	if why := e.misdirected(cmd, len(e.opt.Keys) > 0 && !local); why != "" {
		// Whoever can publish on this gateway's topic can copy another
		// gateway's command onto it: no packet, as for a forgery.
		res := Result{ID: cmd.ID, Status: StatusRejected, Reason: "command " + cmd.ID + ": " + why, Value: cmd.Value, At: now}
		e.refused(&cmd, res, false)
		return res
	}
	// Too late or too early: never run, whether seen before or not, so
	// the id need not be kept.
	if st, why := e.untimely(cmd, now); st != "" {
		e.refused(&cmd, Result{ID: cmd.ID, Status: st, Reason: why, Value: cmd.Value, At: now}, true)
		return Result{ID: cmd.ID, Status: st, Reason: why, Value: cmd.Value, At: now}
	}
	prior, err := e.opt.Ledger.Begin(cmd, now)
	if err != nil {
		// Cannot promise "at most once": do not run it.
		res := Result{ID: cmd.ID, Status: StatusRejected, Reason: "cannot record the command id: " + err.Error(), Value: cmd.Value, At: now}
		e.refused(&cmd, res, true)
		return res
	}
	if prior != nil {
		// A duplicate (its first result, or pending while it runs), or a
		// command the ledger cannot vouch for.
		e.opt.Log.Info("command not run: answered from the command ledger", "id", cmd.ID, "status", prior.Status, "reason", prior.Reason)
		if e.opt.Publish != nil {
			e.opt.Publish(*prior)
		}
		return *prior
	}
	res := e.execute(ctx, cmd, now)
	if err := e.opt.Ledger.Finish(res); err != nil {
		e.opt.Log.Error("command result not recorded in the audit log", "id", cmd.ID, "err", err)
	}
	e.report(&cmd, res, true)
	return res
}

// misdirected says why cmd is not for this gateway, "" when it is: it
// names another site or gateway, or, when signed is set (the signature
// was checked), names none, since only the signed names bind a signature
// to one gateway.
func (e *Engine) misdirected(cmd Command, signed bool) string {
	switch {
	case signed && cmd.Gateway == "":
		return fmt.Sprintf("names no gateway: a signed command must name the site and gateway it is for (site %q, gateway %q here)", e.site, e.gateway)
	case signed && cmd.Site == "":
		return fmt.Sprintf("names no site: a signed command must name the site and gateway it is for (site %q, gateway %q here)", e.site, e.gateway)
	case cmd.Gateway != "" && cmd.Gateway != e.gateway, cmd.Site != "" && cmd.Site != e.site:
		site, gw := cmd.Site, cmd.Gateway
		if site == "" {
			site = "(none)"
		}
		if gw == "" {
			gw = "(none)"
		}
		what := "signed"
		if !signed {
			what = "sent"
		}
		return fmt.Sprintf("%s for gateway %s at site %s; this is gateway %s at site %s", what, gw, site, e.gateway, e.site)
	}
	return ""
}

// notWritable says why cmd has no writable point: no such device, or a
// point the site file does not list as writable, with the name meant when
// one is near.
func (e *Engine) notWritable(cmd Command, end func(Status, string, ...any) Result) Result {
	if !slices.Contains(e.devices, cmd.Device) {
		return end(StatusRejected, "no device %s on this gateway%s", cmd.Device, yamlconf.DidYouMean(cmd.Device, e.devices))
	}
	var writable []string
	for k := range e.points {
		if k[0] == cmd.Device {
			writable = append(writable, k[1])
		}
	}
	hint := yamlconf.DidYouMean(cmd.Point, writable)
	if hint == "" {
		hint = " (the site file lists the writable points of each device)"
	}
	return end(StatusRejected, "%s.%s is not writable on this gateway%s", cmd.Device, cmd.Point, hint)
}

// execute checks and runs cmd; the id is already kept.
func (e *Engine) execute(ctx context.Context, cmd Command, now time.Time) Result {
	res := Result{ID: cmd.ID, Value: cmd.Value, At: now}
	end := func(st Status, format string, a ...any) Result {
		res.Status, res.Reason, res.At = st, fmt.Sprintf(format, a...), e.opt.Now()
		return res
	}
	p := e.points[[2]string{cmd.Device, cmd.Point}]
	if p == nil {
		return e.notWritable(cmd, end)
	}
	v, err := p.value(cmd.Value)
	if err != nil {
		return end(StatusRejected, "%s.%s: %v", cmd.Device, cmd.Point, err)
	}
	if why := e.interlocked(p, now); why != "" {
		return end(StatusRejected, "interlock: %s", why)
	}
	// The bus's context runs on this process's clock, not on Options.Now:
	// WriteTimeout from the start, or what is left until expires_at by
	// the gateway's clock if that is shorter.
	limit := WriteTimeout
	if !cmd.ExpiresAt.IsZero() {
		limit = min(limit, cmd.ExpiresAt.Time().Sub(now))
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	attempts := 1
	if p.rule.Idempotent {
		attempts = maxAttempts
	}
	for n := 1; ; n++ {
		out, err := e.opt.Points.Write(ctx, p.device, p.reg.Name, v)
		if err != nil {
			if errors.Is(err, profile.ErrNotWritable) {
				return end(StatusRejected, "%v", err)
			}
			if ctx.Err() != nil && !cmd.ExpiresAt.IsZero() && !e.opt.Now().Before(cmd.ExpiresAt.Time()) {
				return end(StatusExpired, "not written before it expired: %v", err)
			}
			return end(StatusFailed, "not written: %v", err)
		}
		if out.ReadErr == nil {
			res.Readback = fromPacket(out.Readback)
		}
		matched := out.ReadErr == nil && p.matches(out.Readback, v)
		switch {
		case out.Err == nil && matched:
			return end(StatusDone, "")
		case out.Err == nil && out.ReadErr == nil:
			return end(StatusFailed, "the device took the write but reads back %s, not %s (clamped or ignored)", out.Readback, cmd.Value)
		case out.Err == nil:
			return end(StatusUnknownOutcome, "the device took the write but the read-back failed: %v", out.ReadErr)
		case e.opt.Errors.Refused != nil && e.opt.Errors.Refused(out.Err):
			return end(StatusFailed, "the device refused the write: %v", out.Err)
		case matched:
			res.Reason = "no reply to the write; settled by reading the point back"
			res.Status, res.At = StatusDone, e.opt.Now()
			return res
		}
		notSent := e.opt.Errors.NotSent != nil && e.opt.Errors.NotSent(out.Err)
		if n < attempts && ctx.Err() == nil {
			e.opt.Log.Warn("command write retried (idempotent point)", "id", cmd.ID, "device", p.device, "point", p.reg.Name, "attempt", n, "err", out.Err)
			continue
		}
		if notSent {
			return end(StatusFailed, "not written: %v", out.Err)
		}
		if out.ReadErr != nil {
			return end(StatusUnknownOutcome, "no reply to the write (%v) and the read-back failed (%v)", out.Err, out.ReadErr)
		}
		return end(StatusUnknownOutcome, "no reply to the write (%v); the point reads back %s", out.Err, out.Readback)
	}
}

// untimely returns the status and reason of a command that is too late
// or too early to run at now; "" when it is on time.
func (e *Engine) untimely(cmd Command, now time.Time) (Status, string) {
	issued := cmd.IssuedAt.Time()
	switch {
	case !cmd.ExpiresAt.IsZero() && !now.Before(cmd.ExpiresAt.Time()):
		return StatusExpired, fmt.Sprintf("expired at %s", cmd.ExpiresAt)
	case now.Sub(issued) > e.maxAge:
		return StatusExpired, fmt.Sprintf("issued %s ago, more than max_age %v", now.Sub(issued).Round(time.Second), e.maxAge)
	case issued.Sub(now) > futureSkew:
		return StatusRejected, fmt.Sprintf("issued_at %s is %s ahead of the gateway's clock", cmd.IssuedAt, issued.Sub(now).Round(time.Second))
	}
	return "", ""
}

// fromPacket turns a read-back into a result value.
func fromPacket(v packet.Value) Value {
	if v.Kind() == packet.KindBool {
		return Bool(v.String() == "True")
	}
	if f, ok := v.Float64(); ok {
		return Number(f)
	}
	return Value{}
}

// idOf digs the id out of a command that did not parse, so that the
// platform can match the rejection; "" when there is none to trust.
func idOf(payload []byte) string {
	var probe struct {
		ID string `json:"id"`
	}
	if err := jsonUnmarshalLenient(payload, &probe); err != nil || checkID(probe.ID) != nil {
		return ""
	}
	return probe.ID
}

// Counts returns how many commands ended in each status.
func (e *Engine) Counts() map[Status]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.counts)
}

// Recent returns the last results, oldest first.
func (e *Engine) Recent() []Recent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.recent)
}

// Describe is a one-line summary of the writable points, for logs. It is
// safe beside a reload's Configure and does not wait for a running
// command.
func (e *Engine) Describe() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.described
}

func jsonUnmarshalLenient(b []byte, v any) error {
	if len(b) > MaxCommandSize {
		return errors.New("too large")
	}
	return json.Unmarshal(b, v)
}
