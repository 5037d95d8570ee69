// Package sensors polls the devices of a site: one goroutine per bus, one
// request at a time on each bus, each device on its own schedule, and turns
// every successful poll into a packet.
//
// A bus is a serial line (RS-485, half duplex) or a Modbus TCP endpoint.
// Requests are planned once per device (package plan) so that a poll reads
// as few and as cheap frames as the device allows. A device that stops
// answering is backed off exponentially so that it cannot starve the rest
// of its bus, and comes back on schedule once it answers again.
package sensors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/packet"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/plan"
	"fieldlink/sensors/profile"
)

// BusCost is the request planner's timing model for a bus: wire timing on
// a serial line (and behind an RTU-over-TCP server, whose serial side has
// the same physics), a fixed round trip over Modbus TCP.
func BusCost(ep modbus.Endpoint, turnaround time.Duration) plan.Cost {
	if ep.Serial() {
		return plan.Serial(ep.Baud, ep.BitsPerChar(), turnaround)
	}
	// Over TCP a register costs nanoseconds and a request a round trip:
	// fill every gap the limits allow.
	return plan.Cost{CharTime: time.Microsecond / 10, Turnaround: turnaround + time.Millisecond}
}

// Reader reads registers or bits from a slave: a Modbus client. fc is the
// read function (1–4); the reply is the wire bytes (2 per register, or the
// packed bits).
type Reader interface {
	Read(ctx context.Context, slave, fc byte, addr, qty uint16) ([]byte, error)
}

// DeviceSpec is one slave to poll.
type DeviceSpec struct {
	Name     string // DeviceId in packets
	Slave    byte
	Profile  *profile.Profile
	Interval time.Duration
	DataType string
}

// BusOptions tune a bus; the zero value is usable.
type BusOptions struct {
	// Cost is the bus's timing model for the request planner; zero means
	// a 9600-baud 8N1 line with a 10 ms turnaround.
	Cost plan.Cost
	// MaxGap caps the unwanted registers a merged read may span; < 0 lets
	// the cost model decide. Zero means no gaps are read.
	MaxGap int
	// Backoff caps the delay between polls of a failing device; 0 = 5m.
	Backoff time.Duration
	// OfflineAfter consecutive failures mark a device offline; 0 = 3.
	OfflineAfter int
	// Logger receives state changes and (rate-limited) errors; nil = discard.
	Logger *slog.Logger
	// Hint, if set, says what a technician should check about a failure;
	// it is added to the failure's log line.
	Hint func(error) string
	// Port is the serial port the bus's reader opens ("" when it dials):
	// a poll failing because the port went away marks the bus's port down
	// (see [DeviceStatus.Port]) rather than only its devices failing.
	Port string
	// Open opens the bus's reader when [NewBus] was given none, because
	// its port could not open at start (unplugged, not enumerated yet,
	// busy, not allowed). Run retries it, 1 s after the failure and then
	// doubling up to 30 s, and polls once it opens: a port plugged in
	// later needs no restart. Open may return a *PortError or any error,
	// which is then classified by [PortErrorOf].
	Open func() (Reader, error)
}

// Health of a device.
type Health uint8

// Device health states.
const (
	Unknown  Health = iota // not polled yet
	OK                     // last poll succeeded
	Degraded               // last poll failed, fewer than OfflineAfter in a row
	Offline                // OfflineAfter or more failures in a row; backed off
)

func (h Health) String() string {
	return [...]string{"unknown", "ok", "degraded", "offline"}[h]
}

// DeviceStatus is a snapshot of one device's counters.
type DeviceStatus struct {
	Name      string
	Bus       string
	Health    Health
	LastError string
	LastOK    time.Time
	Polls     uint64 // poll attempts
	Errors    uint64 // failed polls
	Requests  uint64 // read requests sent
	Overruns  uint64 // scheduled polls skipped because the bus was late
	Writes    uint64 // writes sent by commands
	// Port is the state of the bus's serial port, the same for every
	// device of the bus: down (since when, why) while it cannot open.
	Port PortState
	// ConsecutiveFailures counts the failed polls since the last success:
	// OfflineAfter of them make the device Offline.
	ConsecutiveFailures int
	// Failure is the last failed poll's kind, for words that need not
	// read LastError's text; the zero Failure while the device answers.
	Failure Failure
	// LastDuration is how long the last poll took on the wire.
	LastDuration time.Duration
	// Busy is the time spent polling the device so far; summed over a
	// bus's devices it is the bus's busy time (polls run one at a time).
	Busy time.Duration
}

type device struct {
	spec   DeviceSpec
	reqs   []plan.Request
	next   time.Time // next scheduled poll
	due    time.Time // slot of the schedule the next poll belongs to
	streak streak    // written under Bus.mu by the polling goroutine only
	status DeviceStatus
	last   lastRead // under Bus.mu
	// replies holds the current poll's reply bytes, by request; only the
	// polling goroutine touches it.
	replies [][]byte
}

// Bus polls the devices of one line or endpoint.
type Bus struct {
	name string
	r    Reader
	opt  BusOptions
	log  *slog.Logger

	mu        sync.Mutex // guards devs[i].status, r, port, portFails and portLog
	devs      []*device
	port      PortState
	portFails int       // failed opens in a row
	portLog   time.Time // when the port's state was last logged

	// writes hands writes to the polling goroutine while Run runs
	// (running); inline serialises them when it does not.
	writes  chan *writeJob
	running atomic.Bool
	inline  sync.Mutex
}

// NewBus plans the requests of every device. It fails only when a profile
// cannot be read within the limits, which profile validation prevents.
func NewBus(name string, r Reader, specs []DeviceSpec, opt BusOptions) (*Bus, error) {
	if opt.Cost == (plan.Cost{}) {
		opt.Cost = plan.Serial(9600, 10, 10*time.Millisecond)
	}
	b := &Bus{name: name, r: r, opt: opt, log: opt.Logger, writes: make(chan *writeJob)}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.log = b.log.With("bus", name)
	for _, s := range specs {
		if s.Interval <= 0 {
			return nil, fmt.Errorf("sensors: device %s: interval must be positive", s.Name)
		}
		reqs, err := PlanDevice(s.Profile, opt.MaxGap, opt.Cost)
		if err != nil {
			return nil, fmt.Errorf("sensors: device %s: %w", s.Name, err)
		}
		b.devs = append(b.devs, &device{
			spec: s, reqs: reqs, status: DeviceStatus{Name: s.Name, Bus: name}, replies: make([][]byte, len(reqs)),
			streak: newStreak(opt.OfflineAfter, opt.Backoff, defaultBusBackoff),
		})
	}
	return b, nil
}

// PlanDevice returns the read requests for one poll of a profile.
func PlanDevice(p *profile.Profile, maxGap int, c plan.Cost) ([]plan.Request, error) {
	items := make([]plan.Item, len(p.Registers))
	for i := range p.Registers {
		r := &p.Registers[i]
		items[i] = plan.Item{Area: r.Area, Address: r.Address, Words: r.Words(), Ref: i}
	}
	return plan.Plan(items, plan.Limits{
		MaxRegisters: p.MaxRegisters(), MaxBits: p.MaxBits(), Holes: p.Holes, MaxGap: maxGap,
	}, c)
}

// Name is the bus name.
func (b *Bus) Name() string { return b.name }

// Requests returns the planned requests of each device, by device name.
func (b *Bus) Requests() map[string][]plan.Request {
	out := make(map[string][]plan.Request, len(b.devs))
	for _, d := range b.devs {
		out[d.spec.Name] = d.reqs
	}
	return out
}

// Status returns a snapshot of every device's health and counters.
func (b *Bus) Status() []DeviceStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]DeviceStatus, len(b.devs))
	for i, d := range b.devs {
		out[i] = d.status
		out[i].Port = b.port
	}
	return out
}

// Port returns the state of the bus's serial port.
func (b *Bus) Port() PortState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.port
}

// reader is the bus's reader; nil while its port has not opened yet.
func (b *Bus) reader() Reader {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.r
}

// open opens the bus's reader once if it has none yet, and returns it, or
// the port's error; the port's state and its log line follow.
func (b *Bus) open() (Reader, error) {
	if r := b.reader(); r != nil {
		return r, nil
	}
	if b.opt.Open == nil {
		return nil, fmt.Errorf("sensors: bus %s has no reader", b.name)
	}
	r, err := b.opt.Open()
	if err != nil {
		pe := PortErrorOf(b.opt.Port, err)
		b.portDown(pe)
		return nil, pe
	}
	b.mu.Lock()
	b.r = r
	b.mu.Unlock()
	b.portUp()
	return r, nil
}

// portDown records that the bus's port cannot be used, and logs it when
// the bus goes down, its reason changes, or once a minute while it stays.
func (b *Bus) portDown(pe *PortError) {
	now := time.Now()
	b.mu.Lock()
	b.portFails++
	changed := b.port.set(pe, now)
	retry, since, fails := portRetry(b.portFails), b.port.Since, b.portFails
	log := changed || now.Sub(b.portLog) >= repeatLogEvery
	if log {
		b.portLog = now
	}
	b.mu.Unlock()
	if !log {
		return
	}
	args := []any{"port", pe.Port, "problem", pe.Kind.String(), "down_since", since.Format(time.RFC3339), "err", pe.Err}
	if b.opt.Open != nil && b.reader() == nil {
		args = append(args, "retry_in", retry, "tries", fails)
	}
	b.log.Warn("bus down: "+pe.Advice(), args...)
}

// portUp records that the bus's port is open (or answers again), and
// logs it if it was down.
func (b *Bus) portUp() {
	b.mu.Lock()
	was := b.port
	b.portFails = 0
	changed := b.port.set(nil, time.Now())
	b.mu.Unlock()
	if changed {
		b.log.Info("bus up: port open", "port", b.opt.Port, "was", was.Kind().String(), "down_for", time.Since(was.Since).Round(time.Millisecond))
	}
}

// connect opens the bus's reader, retrying with a growing delay until it
// opens or ctx ends (then it reports false). Writes handed to the bus
// meanwhile fail at once with the port's error.
func (b *Bus) connect(ctx context.Context) bool {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		_, err := b.open()
		if err == nil {
			return true
		}
		b.mu.Lock()
		wait := portRetry(max(b.portFails, 1))
		b.mu.Unlock()
		timer.Reset(wait)
	wait:
		for {
			select {
			case <-ctx.Done():
				return false
			case j := <-b.writes:
				j.out.Err = fmt.Errorf("sensors: bus %s: not sent: %w", b.name, err)
				close(j.done)
			case <-timer.C:
				break wait
			}
		}
	}
}

// PollAll polls every device once, in configuration order, and calls emit
// with each packet, or with the error of a device that failed.
func (b *Bus) PollAll(ctx context.Context, emit func(*packet.Packet, error)) {
	if _, err := b.open(); err != nil {
		for _, d := range b.devs {
			emit(nil, fmt.Errorf("device %s (slave %d on bus %s): %w", d.spec.Name, d.spec.Slave, b.name, err))
		}
		return
	}
	for _, d := range b.devs {
		if ctx.Err() != nil {
			return
		}
		emit(b.poll(ctx, d))
	}
}

// Run polls every device on its schedule until ctx is done, calling emit
// (from this goroutine) with each packet. Intervals are kept from the
// schedule, not from completion: a poll that runs late does not push the
// next one back, and slots missed entirely are counted as overruns, never
// made up in a burst.
func (b *Bus) Run(ctx context.Context, emit func(*packet.Packet)) {
	b.inline.Lock() // a write in progress inline ends first
	b.running.Store(true)
	b.inline.Unlock()
	defer b.running.Store(false)
	if b.reader() == nil && !b.connect(ctx) {
		return
	}
	now := time.Now()
	for _, d := range b.devs {
		// Every device starts on the same instant, so devices with equal
		// intervals stay in phase: the bus polls them back to back, in
		// configuration order, and their packets share one commit in the
		// buffer (see packet.Packet.More).
		d.due, d.next = now, now
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d := b.earliest()
		if d == nil {
			<-ctx.Done()
			return
		}
		// A write waiting goes before the next poll.
		select {
		case j := <-b.writes:
			b.write(j)
			continue
		default:
		}
		if wait := time.Until(d.next); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case j := <-b.writes:
				timer.Stop()
				b.write(j)
				continue
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		failing := d.streak.fails > 0
		p, err := b.poll(ctx, d)
		if ctx.Err() != nil {
			return
		}
		end := time.Now()
		b.reschedule(d, err == nil, end)
		if err == nil && failing {
			b.lineBack(d, end)
		}
		if err == nil {
			p.More = !b.earliest().next.After(end)
			emit(p)
		}
	}
}

func (b *Bus) earliest() *device {
	var best *device
	for _, d := range b.devs {
		if best == nil || d.next.Before(best.next) {
			best = d
		}
	}
	return best
}

// lineBack is called when d answers after failing. If every other device
// on the bus was failing too, the line itself was down (a cut cable, a dead
// converter, the power of the sensors) and is back: the others are retried
// now rather than at the end of the backoffs they grew during the outage.
// A dead device among live neighbours never triggers it: it keeps its
// backoff, which spares the bus its timeouts.
func (b *Bus) lineBack(d *device, now time.Time) {
	for _, o := range b.devs {
		if o != d && o.streak.fails == 0 {
			return
		}
	}
	for _, o := range b.devs {
		if o != d && o.next.After(now) {
			o.next, o.due = now, now
		}
	}
}

// reschedule sets the next poll of d after a poll that ended at now.
func (b *Bus) reschedule(d *device, ok bool, now time.Time) {
	iv := d.spec.Interval
	if !ok && d.streak.fails > 1 {
		// Back off; the schedule resumes on the first success.
		d.next = now.Add(d.streak.backoff(iv))
		d.due = d.next
		return
	}
	next := d.due.Add(iv)
	if !next.After(now) {
		missed := uint64(now.Sub(d.due) / iv)
		b.mu.Lock()
		d.status.Overruns += missed
		b.mu.Unlock()
		next = d.due.Add(time.Duration(missed+1) * iv)
	}
	d.due, d.next = next, next
}

// poll reads one device once and builds its packet.
func (b *Bus) poll(ctx context.Context, d *device) (*packet.Packet, error) {
	start := time.Now()
	p := &packet.Packet{At: start, DeviceID: d.spec.Name, DataType: d.spec.DataType}
	p.Fields = make([]packet.Field, len(d.spec.Profile.Registers))
	var err error
	var sent uint64
	r := b.reader()
	for i, req := range d.reqs {
		var data []byte
		sent++
		data, err = r.Read(ctx, d.spec.Slave, req.Area.FunctionCode(), req.Start, req.Count)
		d.replies[i] = data
		if err != nil {
			err = &deviceError{fmt.Sprintf("device %s (slave %d on bus %s)", d.spec.Name, d.spec.Slave, b.name), fmt.Errorf("read %s: %w", req, err)}
			break
		}
		if err = decodeInto(p, d.spec.Profile, req, data); err != nil {
			err = &deviceError{fmt.Sprintf("device %s (slave %d on bus %s)", d.spec.Name, d.spec.Slave, b.name), fmt.Errorf("%s: %w", req, err)}
			break
		}
	}
	if err != nil && ctx.Err() != nil {
		// Cut off by shutdown: not the device's fault.
		return nil, err
	}
	b.record(d, start, sent, p, err)
	if b.opt.Port != "" {
		// The port itself gone (an adapter unplugged while running) is
		// the bus's state, not only its devices'.
		switch {
		case err == nil:
			b.portUp()
		case IsPortError(err):
			b.portDown(PortErrorOf(b.opt.Port, err))
		}
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ErrReplySize means a reply carried fewer bytes than the request asked for.
var ErrReplySize = errors.New("reply shorter than requested")

func decodeInto(p *packet.Packet, prof *profile.Profile, req plan.Request, data []byte) error {
	for _, ref := range req.Refs {
		r := &prof.Registers[ref]
		off := int(r.Address - req.Start)
		var v packet.Value
		if r.Area.IsBit() {
			if off/8 >= len(data) {
				return ErrReplySize
			}
			v = packet.Bool(data[off/8]&(1<<(off%8)) != 0)
		} else {
			end := 2 * (off + r.Words())
			if end > len(data) {
				return ErrReplySize
			}
			v = r.Decode(data[2*off : end])
		}
		p.Fields[ref] = packet.Field{Name: r.Name, Value: v}
		if r.Alarmed(v) {
			p.AlarmFields = append(p.AlarmFields, r.Name)
		}
	}
	return nil
}

// record updates counters and health, and logs state changes; repeated
// errors of a device are logged at most once a minute.
func (b *Bus) record(d *device, start time.Time, sent uint64, p *packet.Packet, err error) {
	now := time.Now()
	hint := ""
	if err != nil && b.opt.Hint != nil {
		hint = b.opt.Hint(err)
	}
	b.mu.Lock()
	if err == nil {
		d.last.keep(p, d.replies)
	}
	st := &d.status
	st.Requests += sent
	st.LastDuration = now.Sub(start)
	st.Busy += st.LastDuration
	line := d.streak.record(st, now, err)
	st.Failure.Hint = hint
	b.mu.Unlock()
	if line.msg != "" && hint != "" {
		line.args = append(line.args, "hint", hint)
	}
	line.to(b.log.With("device", d.spec.Name, "slave", d.spec.Slave))
}
