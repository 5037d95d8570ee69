package sensors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

// Writer writes coils or registers of a slave: a Modbus client. fc is 5, 6,
// 15 or 16; data is the request's data bytes after the quantity.
type Writer interface {
	Write(ctx context.Context, slave, fc byte, addr, qty uint16, data []byte) error
}

// ErrNoSuchPoint means a write named a device or point the site does not
// have.
var ErrNoSuchPoint = errors.New("no such device or point")

// ErrCannotWrite means the bus's client cannot write (a test reader).
var ErrCannotWrite = errors.New("the bus cannot write")

// WriteResult is what one write did.
type WriteResult struct {
	// Err is the write's own error: nil when the device echoed it. Test it
	// with the modbus package's predicates to tell a refusal from a lost
	// reply.
	Err error
	// Readback is the point read back after the write (also after a
	// failed one, to settle it); ReadErr is why it could not be.
	Readback packet.Value
	Raw      []byte
	ReadErr  error
	// Frames is the data bytes written, for the audit.
	Frames []byte
}

// writeJob is a write waiting for its turn on the bus.
type writeJob struct {
	ctx  context.Context
	d    *device
	reg  *profile.Register
	fc   byte
	qty  uint16
	data []byte
	out  WriteResult
	done chan struct{}
}

// Write writes v (engineering units) to a point of a device on this bus and
// reads it back. The write is one transaction of the bus's own schedule: a
// running bus takes it before its next poll, so it never interleaves with
// a poll's frames; a bus that is not running (gateway write without a
// daemon) runs it at once. A value the register cannot hold is refused
// before anything is sent (the error wraps profile.ErrNotWritable).
func (b *Bus) Write(ctx context.Context, dev, point string, v float64) (WriteResult, error) {
	var d *device
	for _, x := range b.devs {
		if x.spec.Name == dev {
			d = x
		}
	}
	if d == nil {
		return WriteResult{}, fmt.Errorf("%w: no device %q on bus %s", ErrNoSuchPoint, dev, b.name)
	}
	reg, ok := d.spec.Profile.Register(point)
	if !ok {
		return WriteResult{}, fmt.Errorf("%w: device %s has no point %q", ErrNoSuchPoint, dev, point)
	}
	if !reg.Writable() {
		return WriteResult{}, fmt.Errorf("device %s: %s: %w (read-only or safety in profile %s)", dev, point, profile.ErrNotWritable, d.spec.Profile.Name)
	}
	r := b.reader()
	if r == nil && !b.running.Load() {
		// gateway write without a daemon: the port opens now or never.
		var err error
		if r, err = b.open(); err != nil {
			return WriteResult{}, fmt.Errorf("device %s: %s: not sent: %w", dev, point, err)
		}
	}
	if r == nil {
		// Run is opening the port: a write does not wait for an adapter.
		if pe := b.Port().Err; pe != nil {
			return WriteResult{}, fmt.Errorf("device %s: %s: not sent: bus %s is down: %w", dev, point, b.name, pe)
		}
		return WriteResult{}, fmt.Errorf("device %s: %s: not sent: bus %s has not opened its port yet", dev, point, b.name)
	}
	if _, ok := r.(Writer); !ok {
		return WriteResult{}, ErrCannotWrite
	}
	fc, qty, data, err := reg.WriteRequest(v)
	if err != nil {
		return WriteResult{}, fmt.Errorf("device %s: %s: %w", dev, point, err)
	}
	j := &writeJob{ctx: ctx, d: d, reg: reg, fc: fc, qty: qty, data: data, done: make(chan struct{})}
	if !b.running.Load() {
		b.inline.Lock()
		defer b.inline.Unlock()
		b.write(j)
		return j.out, nil
	}
	select {
	case b.writes <- j:
	case <-ctx.Done():
		return WriteResult{}, fmt.Errorf("device %s: %s: not sent, the bus did not take the write in time: %w", dev, point, ctx.Err())
	}
	<-j.done
	return j.out, nil
}

// write runs a write and its read-back, from the polling goroutine (or
// inline when the bus does not run).
func (b *Bus) write(j *writeJob) {
	defer close(j.done)
	d, reg := j.d, j.reg
	start := time.Now()
	j.out.Frames = j.data
	r := b.reader()
	j.out.Err = r.(Writer).Write(j.ctx, d.spec.Slave, j.fc, reg.Address, j.qty, j.data)
	data, err := r.Read(j.ctx, d.spec.Slave, reg.Area.FunctionCode(), reg.Address, uint16(reg.Words()))
	switch {
	case err != nil:
		j.out.ReadErr = err
	case reg.Area.IsBit():
		if len(data) < 1 {
			j.out.ReadErr = ErrReplySize
			break
		}
		j.out.Raw = []byte{data[0] & 1}
		j.out.Readback = packet.Bool(data[0]&1 != 0)
	case len(data) < 2*reg.Words():
		j.out.ReadErr = ErrReplySize
	default:
		j.out.Raw = data[:2*reg.Words()]
		j.out.Readback = reg.Decode(j.out.Raw)
	}
	b.mu.Lock()
	d.status.Writes++
	d.status.Busy += time.Since(start)
	b.mu.Unlock()
}

// Write writes v to a point of a device of the site; see [Bus.Write].
func (s *Poller) Write(ctx context.Context, device, point string, v float64) (WriteResult, error) {
	for _, b := range s.buses {
		for _, d := range b.devs {
			if d.spec.Name == device {
				return b.Write(ctx, device, point, v)
			}
		}
	}
	return WriteResult{}, fmt.Errorf("%w: no Modbus device %q in this site", ErrNoSuchPoint, device)
}
