package modbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/internal/serialline"
	"fieldlink/sensors/modbus/spec"
)

// DefaultTimeout is the request deadline used when [Options.Timeout] is 0.
// It leaves room for a 125-register reply at 9600 baud (about 0.3 s) plus a
// slow slave's turnaround.
const DefaultTimeout = time.Second

// Options tune a [Client]. The zero value is ready to use.
type Options struct {
	// Timeout bounds one whole request: discarding stale input, waiting for
	// the silent interval, dialing (TCP), sending and receiving the complete
	// reply. A sooner deadline on the ctx passed to [Client.Read] or
	// [Client.Write] wins.
	// 0 means [DefaultTimeout].
	Timeout time.Duration

	// Logger receives rare events: a link dropped after an error and
	// reopened, stale bytes discarded, the USB latency timer changed.
	// Requests themselves are not logged; read [Client.Stats] instead.
	// nil discards everything.
	Logger *slog.Logger
}

// transport performs one request/reply exchange on one kind of link. It is
// only ever called while holding Client.bus, so it may keep per-link state
// (the open connection, the time the line went quiet, the transaction id).
type transport interface {
	exchange(ctx context.Context, deadline time.Time, r *request) ([]byte, error)
	close() error
}

// Client is a Modbus master on one bus (a serial line, or one TCP peer).
//
// It is safe for concurrent use, but it sends one request at a time and
// holds the bus until the reply is judged: RS-485 is half duplex, and a
// second request sent before the first reply would collide with it. A
// caller waiting for the bus gives up when its ctx ends. Every
// per-request value (slave id, function, address, quantity, data) is an
// argument of [Client.Read] or [Client.Write]; the Client has no mutable
// per-slave state.
type Client struct {
	timeout time.Duration
	log     *slog.Logger
	serial  bool // slave ids limited to 1..247 as on a serial line
	stats   counters

	// bus is a one-slot semaphore held for a whole exchange (a mutex
	// that a waiting caller can abandon when its ctx ends). It guards tr
	// and closed.
	bus    chan struct{}
	tr     transport
	closed bool
}

func newClient(opt Options, serialLine bool) *Client {
	c := &Client{timeout: opt.Timeout, log: opt.Logger, serial: serialLine, bus: make(chan struct{}, 1)}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Open returns a Client for the bus named by rawURL, one of
//
//	rtu:///dev/ttyUSB0?baud=9600&parity=N&data_bits=8&stop_bits=1
//	tcp://host[:502]
//	rtuovertcp://host:port[?baud=9600]
//
// For rtu the query keys are optional (defaults shown; parity is N, E or O,
// stop_bits 1 or 2, data_bits must be 8). The serial port is opened here so
// that a wrong path or missing permission fails at start-up, with the port
// named in the error; after an I/O error it is closed and reopened by the
// next request, which recovers from a USB adapter being replugged.
//
// tcp is Modbus TCP (MBAP header). rtuovertcp sends RTU frames over a TCP
// socket, as serial device servers do; its optional baud is the speed of
// the serial bus behind the device server and only sets frame timing. Both
// dial lazily on the first request and redial after a failure.
func Open(rawURL string, opt Options) (*Client, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	switch cfg.scheme {
	case schemeRTU:
		c := newClient(opt, true)
		open := func(context.Context, time.Time) (Link, error) { return openSerial(cfg, c.log) }
		link, err := open(context.Background(), time.Time{})
		if err != nil {
			return nil, err
		}
		c.tr = newRTUTransport(link, open, cfg.device, cfg.Baud, cfg.CharBits(), &c.stats, c.log)
		return c, nil
	case schemeRTUOverIP:
		c := newClient(opt, true)
		dial := dialTCP(cfg.address)
		open := func(ctx context.Context, deadline time.Time) (Link, error) { return dial(ctx, deadline) }
		c.tr = newRTUTransport(nil, open, cfg.address, cfg.Baud, rtuBitsPerChar, &c.stats, c.log)
		return c, nil
	default:
		c := newClient(opt, false)
		c.tr = newTCPTransport(cfg.address, dialTCP(cfg.address), &c.stats, c.log)
		return c, nil
	}
}

// NewRTU returns a Client that speaks Modbus RTU over link, which it owns
// from now on (Close closes it). baud is the speed of the serial line, used
// for the silent interval between frames; 0 means 9600. Characters are
// assumed to be 11 bits long, as the RTU specification requires.
//
// Unlike [Open], the link is never reopened: an I/O error is returned and
// the next request tries the same link again.
func NewRTU(link Link, baud int, opt Options) *Client {
	if baud <= 0 {
		baud = serialline.Default.Baud
	}
	c := newClient(opt, true)
	c.tr = newRTUTransport(link, nil, "link", baud, rtuBitsPerChar, &c.stats, c.log)
	return c
}

// Read reads qty coils (fc 1), discrete inputs (fc 2), holding registers
// (fc 3) or input registers (fc 4) starting at addr from slave, and returns
// the data bytes of the reply as they were on the wire: bits packed eight
// to a byte, least significant bit first, ceil(qty/8) bytes for fc 1 and 2;
// big-endian registers, 2*qty bytes for fc 3 and 4. The slice is the
// caller's.
//
// qty is 1..2000 for bits and 1..125 for registers. On a serial line slave
// is 1..247 (0 is broadcast, which gets no reply); over Modbus TCP any unit
// id is allowed.
//
// The request gives up at the sooner of ctx's deadline and [Options.Timeout].
// Failures wrap [ErrTimeout], [ErrCRC], [ErrShortFrame],
// [ErrUnexpectedReply], [ErrLineBusy], [ErrClosed], ctx's error, an I/O error, or, for an
// exception reply, a *[gm.ModbusError] with the exception code; every message
// names the slave, function, address and quantity. A request that never
// reached the wire also wraps [ErrNotSent].
func (c *Client) Read(ctx context.Context, slave byte, fc byte, addr, qty uint16) ([]byte, error) {
	r, err := newRead(slave, fc, addr, qty, c.serial)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, r)
}

// Write writes to slave, starting at addr, with one of the write functions.
// data is the values exactly as they go on the wire, after the address
// (fc 5, 6) or after the quantity and byte count (fc 15, 16):
//
//   - fc 5, write single coil: qty 1, data FF 00 (on) or 00 00 (off). An
//     off is sent like an on, never skipped.
//   - fc 6, write single register: qty 1, data the 2 bytes of the value,
//     big-endian.
//   - fc 15, write multiple coils: qty 1..1968 bits packed eight to a byte,
//     least significant bit first, ceil(qty/8) bytes, unused high bits of
//     the last byte 0.
//   - fc 16, write multiple registers: qty 1..123, 2*qty bytes, each
//     register big-endian. Word order of 32-bit values is the caller's.
//
// A request that fails these checks is refused with [ErrNotSent]. The reply
// must be the one the specification prescribes, the whole request echoed
// for fc 5 and 6, address and quantity echoed for fc 15 and 16; anything
// else is [ErrUnexpectedReply]. A refusal by the slave is a wrapped
// *[gm.ModbusError], as for [Client.Read].
//
// Writes share the bus with reads: they wait for it the same way, and on a
// serial line keep the same silent interval t3.5 between frames.
//
// Slave 0 on a serial line (rtu, rtuovertcp) is a broadcast: every slave
// executes it and none replies. Write then returns nil once the frame is
// sent and the turnaround delay ([BroadcastTurnaround]) has passed, cut short
// by the request's deadline or ctx, so that the next request on the bus does
// not reach slaves still busy with the broadcast. Nothing confirms a
// broadcast; read the slaves back to know. Over Modbus TCP unit 0 is an
// ordinary unit id and gets a reply.
//
// A failed write that is neither [ErrNotSent] nor a Modbus exception reply
// may have been executed: the caller reads the point back to settle it.
func (c *Client) Write(ctx context.Context, slave, fc byte, addr, qty uint16, data []byte) error {
	r, err := newWrite(slave, fc, addr, qty, data, c.serial)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, r)
	return err
}

// do runs one validated request, holding the bus for the whole exchange.
func (c *Client) do(ctx context.Context, r *request) ([]byte, error) {
	select {
	case c.bus <- struct{}{}:
	case <-ctx.Done():
		c.stats.canceled.Add(1)
		return nil, notSent(fmt.Errorf("modbus: %s: not sent, gave up waiting for the bus: %w", r, ctx.Err()))
	}
	defer func() { <-c.bus }()
	if c.closed {
		return nil, notSent(fmt.Errorf("%w: %s", ErrClosed, r))
	}
	if err := ctx.Err(); err != nil {
		c.stats.canceled.Add(1)
		return nil, notSent(fmt.Errorf("modbus: %s: not sent: %w", r, err))
	}
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	data, err := c.tr.exchange(ctx, deadline, r)
	c.stats.record(r, err)
	return data, err
}

// Close closes the link. It waits for a request in progress to end, which
// takes at most the request's deadline. Later calls to Read and Write
// return [ErrClosed]; Close is idempotent.
func (c *Client) Close() error {
	c.bus <- struct{}{}
	defer func() { <-c.bus }()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.tr.close()
}

// Stats returns the counters since the Client was made. It does not wait
// for a request in progress.
func (c *Client) Stats() Stats {
	return c.stats.snapshot()
}

// request is one validated request: a read, or a write with its data.
type request struct {
	slave, fc byte
	addr, qty uint16
	data      []byte // a write's values: after the quantity (fc 5, 6) or the byte count (fc 15, 16)
	want      int    // a read's data bytes in the reply
	broadcast bool   // slave 0 on a serial line: no reply comes
}

// newRead validates a read request.
func newRead(slave, fc byte, addr, qty uint16, serialLine bool) (*request, error) {
	if fc < gm.FuncCodeReadCoils || fc > gm.FuncCodeReadInputRegisters {
		return nil, notSent(fmt.Errorf("modbus: slave %d addr %d qty %d: function code %d is not a read (use 1, 2, 3 or 4)", slave, addr, qty, fc))
	}
	r := &request{slave: slave, fc: fc, addr: addr, qty: qty}
	if err := r.validate(serialLine); err != nil {
		return nil, err
	}
	return r, nil
}

// newWrite validates a write request.
func newWrite(slave, fc byte, addr, qty uint16, data []byte, serialLine bool) (*request, error) {
	r := &request{slave: slave, fc: fc, addr: addr, qty: qty, data: data}
	if !r.isWrite() {
		return nil, notSent(fmt.Errorf("modbus: slave %d addr %d qty %d: function code %d is not a write (use 5, 6, 15 or 16)", slave, addr, qty, fc))
	}
	if err := r.validate(serialLine); err != nil {
		return nil, err
	}
	return r, nil
}

// validate checks a read or write request against the limits of the
// specification, and sets want and broadcast. Every refusal wraps
// [ErrNotSent].
func (r *request) validate(serialLine bool) error {
	refuse := func(format string, args ...any) error {
		return notSent(fmt.Errorf("modbus: %s: "+format, append([]any{r}, args...)...))
	}
	var maxQty uint16
	switch r.fc {
	case gm.FuncCodeReadCoils, gm.FuncCodeReadDiscreteInputs:
		maxQty, r.want = spec.MaxReadBits, (int(r.qty)+7)/8
	case gm.FuncCodeReadHoldingRegisters, gm.FuncCodeReadInputRegisters:
		maxQty, r.want = spec.MaxReadRegisters, 2*int(r.qty)
	case gm.FuncCodeWriteSingleCoil, gm.FuncCodeWriteSingleRegister:
		maxQty = 1
	case gm.FuncCodeWriteMultipleCoils:
		maxQty = spec.MaxWriteBits
	case gm.FuncCodeWriteMultipleRegisters:
		maxQty = spec.MaxWriteRegisters
	}
	if r.qty < 1 || r.qty > maxQty {
		if maxQty == 1 {
			return refuse("quantity must be 1 for a single write")
		}
		return refuse("quantity must be 1..%d", maxQty)
	}
	if int(r.addr)+int(r.qty) > 0x10000 {
		return refuse("range runs past address 65535")
	}
	if r.isWrite() {
		if err := r.checkData(); err != nil {
			return notSent(err)
		}
	}
	if serialLine {
		switch {
		case r.slave == 0 && r.isWrite():
			r.broadcast = true
		case r.slave < 1 || r.slave > 247:
			if r.isWrite() {
				return refuse("slave id must be 1..247, or 0 to broadcast a write, on a serial line")
			}
			return refuse("slave id must be 1..247 on a serial line")
		}
	}
	return nil
}

// checkData checks a write's data against its function and quantity.
func (r *request) checkData() error {
	want := 2
	switch r.fc {
	case gm.FuncCodeWriteMultipleCoils:
		want = (int(r.qty) + 7) / 8
	case gm.FuncCodeWriteMultipleRegisters:
		want = 2 * int(r.qty)
	}
	if len(r.data) != want {
		return fmt.Errorf("modbus: %s: %d data bytes, want %d", r, len(r.data), want)
	}
	switch r.fc {
	case gm.FuncCodeWriteSingleCoil:
		if v := uint16(r.data[0])<<8 | uint16(r.data[1]); v != 0xFF00 && v != 0 {
			return fmt.Errorf("modbus: %s: a coil is written as ff 00 (on) or 00 00 (off)", r)
		}
	case gm.FuncCodeWriteMultipleCoils:
		if used := int(r.qty) % 8; used != 0 && r.data[len(r.data)-1]>>used != 0 {
			return fmt.Errorf("modbus: %s: bits set past the last coil in data byte %#02x", r, r.data[len(r.data)-1])
		}
	}
	return nil
}

func (r *request) isWrite() bool {
	switch r.fc {
	case gm.FuncCodeWriteSingleCoil, gm.FuncCodeWriteSingleRegister,
		gm.FuncCodeWriteMultipleCoils, gm.FuncCodeWriteMultipleRegisters:
		return true
	}
	return false
}

// pdu returns the request's data after the function code: address, then
// quantity (reads), value (fc 5, 6) or quantity, byte count and values
// (fc 15, 16).
func (r *request) pdu() []byte {
	if r.fc == fcMEI {
		return r.data
	}
	b := make([]byte, 0, 5+len(r.data))
	b = append(b, byte(r.addr>>8), byte(r.addr))
	switch r.fc {
	case gm.FuncCodeWriteSingleCoil, gm.FuncCodeWriteSingleRegister:
		return append(b, r.data...)
	case gm.FuncCodeWriteMultipleCoils, gm.FuncCodeWriteMultipleRegisters:
		b = append(b, byte(r.qty>>8), byte(r.qty), byte(len(r.data)))
		return append(b, r.data...)
	}
	return append(b, byte(r.qty>>8), byte(r.qty))
}

// echo is what a write's reply carries after the function code: the whole
// request for fc 5 and 6, address and quantity for fc 15 and 16.
func (r *request) echo() []byte { return r.pdu()[:4] }

func (r *request) String() string {
	if r.fc == fcMEI && len(r.data) == 3 {
		return fmt.Sprintf("slave %d, %s (fc 43/14) object %d", r.slave, fcName(r.fc), r.data[2])
	}
	if r.fc == gm.FuncCodeWriteSingleCoil || r.fc == gm.FuncCodeWriteSingleRegister {
		if len(r.data) == 2 {
			return fmt.Sprintf("slave %d, %s (fc %d) addr %d value %02x %02x", r.slave, fcName(r.fc), r.fc, r.addr, r.data[0], r.data[1])
		}
	}
	return fmt.Sprintf("slave %d, %s (fc %d) addr %d qty %d", r.slave, fcName(r.fc), r.fc, r.addr, r.qty)
}

func fcName(fc byte) string {
	switch fc {
	case gm.FuncCodeReadCoils:
		return "read coils"
	case gm.FuncCodeReadDiscreteInputs:
		return "read discrete inputs"
	case gm.FuncCodeReadHoldingRegisters:
		return "read holding registers"
	case gm.FuncCodeReadInputRegisters:
		return "read input registers"
	case gm.FuncCodeWriteSingleCoil:
		return "write single coil"
	case gm.FuncCodeWriteSingleRegister:
		return "write single register"
	case gm.FuncCodeWriteMultipleCoils:
		return "write multiple coils"
	case gm.FuncCodeWriteMultipleRegisters:
		return "write multiple registers"
	case fcMEI:
		return "read device identification"
	}
	return "function"
}

// exception wraps the typed Modbus exception. FunctionCode is the reply's,
// with the 0x80 bit set, as goburrow's own client reports it.
func (r *request) exception(fc, code byte) error {
	return fmt.Errorf("modbus: %s: %w", r, &gm.ModbusError{FunctionCode: fc, ExceptionCode: code})
}

// isLinkFailure reports whether err says the link itself is broken (as
// opposed to a bad or missing reply on a working link), so that it should be
// closed and reopened.
func isLinkFailure(err error) bool {
	var mbErr *gm.ModbusError
	switch {
	case err == nil, errors.As(err, &mbErr),
		errors.Is(err, ErrTimeout), errors.Is(err, ErrCRC),
		errors.Is(err, ErrShortFrame), errors.Is(err, ErrUnexpectedReply), errors.Is(err, ErrLineBusy),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}
