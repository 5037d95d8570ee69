package sensors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.bug.st/serial"

	"fieldlink/internal/serialline"
	"fieldlink/packet"
	"fieldlink/sensors/lineproto"
	"fieldlink/sensors/profile"
)

// SerialSpec is a serial sensor that prints one reading per line of text.
type SerialSpec struct {
	Name     string
	Profile  *profile.Profile // a line profile
	DataType string
	// Interval: emit at most one packet per interval (the latest line);
	// 0 emits one packet per line.
	Interval time.Duration
	// Open opens the port. Reads must return within a short time even with
	// no data (as a serial port with a read timeout does), so that the
	// sensor can notice cancellation.
	Open func(ctx context.Context) (io.ReadCloser, error)
	// Backoff caps the delay between reopening the port of a failing
	// sensor; 0 = 1m.
	Backoff time.Duration
	// OfflineAfter failures in a row (bad lines, or a port that cannot be
	// opened or read) mark the sensor offline; 0 = 3.
	OfflineAfter int
	// Port names the port Open opens, for the sensor's port state and its
	// log lines. A port that does not open (missing, busy, not allowed) is
	// retried with the delay above but at most 30 s apart, whatever Backoff
	// says: an adapter plugged in is found within half a minute.
	Port string
}

// reopenAfter is the first delay before reopening a port that failed; it
// doubles while the sensor goes on failing.
const reopenAfter = time.Second

// SerialSensor reads a serial sensor of the line protocol.
type SerialSensor struct {
	spec SerialSpec
	log  *slog.Logger
	// sleep waits d before the port is reopened, and reports false if ctx
	// ended first; tests replace it to see the backoff without waiting.
	sleep func(ctx context.Context, d time.Duration) bool

	mu      sync.Mutex // guards status, streak, last and portLog
	status  DeviceStatus
	streak  streak
	last    lastRead
	portLog time.Time // when the port's state was last logged
}

// NewSerialSensor returns a sensor ready to Run or ReadOne.
func NewSerialSensor(spec SerialSpec, log *slog.Logger) *SerialSensor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SerialSensor{
		spec: spec, log: log.With("device", spec.Name), sleep: sleepCtx,
		status: DeviceStatus{Name: spec.Name, Bus: "serial"},
		streak: newStreak(spec.OfflineAfter, spec.Backoff, defaultLineBackoff),
	}
}

// sleepCtx waits d, or until ctx ends: then it reports false.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// SerialOpener opens a serial port with a short read timeout.
func SerialOpener(path string, baud int, parity byte, dataBits, stopBits int) func(context.Context) (io.ReadCloser, error) {
	return func(context.Context) (io.ReadCloser, error) {
		mode := serialline.Settings{Baud: baud, Parity: parity, DataBits: dataBits, StopBits: stopBits}.Mode()
		p, err := serial.Open(path, mode)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		if err := p.SetReadTimeout(200 * time.Millisecond); err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("set read timeout on %s: %w", path, err)
		}
		return p, nil
	}
}

// ctxReader turns a reader whose Read returns (0, nil) on a timeout into
// one that waits for data until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	for {
		if err := c.ctx.Err(); err != nil {
			return 0, err
		}
		n, err := c.r.Read(p)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// Status returns a snapshot of the sensor's health and counters.
func (l *SerialSensor) Status() DeviceStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}

// ReadOne opens the port and returns the first valid reading, waiting at
// most twice the interval or 5 s, whichever is longer.
func (l *SerialSensor) ReadOne(ctx context.Context) (*packet.Packet, error) {
	wait := max(5*time.Second, 2*l.spec.Interval)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var got *packet.Packet
	err := l.session(ctx, func(p *packet.Packet) bool { got = p; return false })
	if got != nil {
		return got, nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no valid line within %v", wait)
	}
	err = &deviceError{"sensor " + l.spec.Name, err}
	l.record(err)
	return nil, err
}

// Run reads lines until ctx ends, reopening the port after an error with a
// delay that doubles while the sensor keeps failing and starts again from
// its first value after a good reading; it emits packets (at most one per
// Interval when set).
func (l *SerialSensor) Run(ctx context.Context, emit func(*packet.Packet)) {
	var last time.Time
	for ctx.Err() == nil {
		err := l.session(ctx, func(p *packet.Packet) bool {
			if l.spec.Interval > 0 && p.At.Sub(last) < l.spec.Interval {
				return true
			}
			last = p.At
			emit(p)
			return true
		})
		if ctx.Err() != nil {
			return
		}
		err = &deviceError{"sensor " + l.spec.Name, err}
		l.record(err)
		l.mu.Lock()
		wait := l.streak.backoff(reopenAfter)
		if l.status.Port.Down() {
			wait = min(wait, portRetryMax)
		}
		l.mu.Unlock()
		if !l.sleep(ctx, wait) {
			return
		}
	}
}

// session opens the port and hands each parsed packet to f until f returns
// false, the port fails or ctx ends.
func (l *SerialSensor) session(ctx context.Context, f func(*packet.Packet) bool) error {
	port, err := l.spec.Open(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pe := PortErrorOf(l.spec.Port, err)
		l.portDown(pe)
		return pe
	}
	l.portUp()
	defer port.Close()
	rd := lineproto.NewReader(ctxReader{ctx, port}, 0)
	for {
		line, err := rd.ReadLine()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, lineproto.ErrLineTooLong) {
				l.record(&deviceError{"sensor " + l.spec.Name, err})
				continue
			}
			return err
		}
		fields, alarmed, ok, err := lineproto.Parse(l.spec.Profile.Line, line)
		if !ok && err == nil {
			continue
		}
		if err != nil {
			l.record(&deviceError{"sensor " + l.spec.Name, err})
			continue
		}
		p := &packet.Packet{At: time.Now(), DeviceID: l.spec.Name, DataType: l.spec.DataType, Fields: fields, AlarmFields: alarmed}
		l.mu.Lock()
		l.last.keep(p, nil)
		l.mu.Unlock()
		l.record(nil)
		if !f(p) {
			return nil
		}
	}
}

// portDown records that the sensor's port does not open, and logs it when
// the port goes down, its reason changes, or once a minute while it stays.
func (l *SerialSensor) portDown(pe *PortError) {
	now := time.Now()
	l.mu.Lock()
	changed := l.status.Port.set(pe, now)
	since := l.status.Port.Since
	log := changed || now.Sub(l.portLog) >= repeatLogEvery
	if log {
		l.portLog = now
	}
	l.mu.Unlock()
	if log {
		l.log.Warn("serial sensor down: "+pe.Advice(), "port", pe.Port, "problem", pe.Kind.String(),
			"down_since", since.Format(time.RFC3339), "err", pe.Err)
	}
}

// portUp records that the sensor's port opened, and logs it if it was
// down.
func (l *SerialSensor) portUp() {
	l.mu.Lock()
	was := l.status.Port
	changed := l.status.Port.set(nil, time.Now())
	l.mu.Unlock()
	if changed {
		l.log.Info("serial sensor up: port open", "port", l.spec.Port, "was", was.Kind().String(), "down_for", time.Since(was.Since).Round(time.Millisecond))
	}
}

// record counts a reading (err nil) or a failure; see streak.record.
func (l *SerialSensor) record(err error) {
	l.mu.Lock()
	line := l.streak.record(&l.status, time.Now(), err)
	l.mu.Unlock()
	line.to(l.log)
}
