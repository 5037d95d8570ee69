package modbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	gm "github.com/goburrow/modbus"
)

// DefaultTimeout is the request deadline used when [Options.Timeout] is 0.
// It leaves room for a 125-register reply at 9600 baud (about 0.3 s) plus a
// slow slave's turnaround.
const DefaultTimeout = time.Second

// Options tune a [Client]. The zero value is ready to use.
type Options struct {
	// Timeout bounds one whole request: discarding stale input, waiting for
	// the silent interval, dialing (TCP), sending and receiving the complete
	// reply. A sooner deadline on the ctx passed to [Client.Read] wins.
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
// per-request value (slave id, function, address, quantity) is an argument
// of [Client.Read]; the Client has no mutable per-slave state.
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
		c.tr = newRTUTransport(link, open, cfg.device, cfg.baud, cfg.bitsPerChar(), &c.stats, c.log)
		return c, nil
	case schemeRTUOverIP:
		c := newClient(opt, true)
		dial := dialTCP(cfg.address)
		open := func(ctx context.Context, deadline time.Time) (Link, error) { return dial(ctx, deadline) }
		c.tr = newRTUTransport(nil, open, cfg.address, cfg.baud, rtuBitsPerChar, &c.stats, c.log)
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
		baud = defaultBaud
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
// names the slave, function, address and quantity.
func (c *Client) Read(ctx context.Context, slave byte, fc byte, addr, qty uint16) ([]byte, error) {
	r, err := newRequest(slave, fc, addr, qty, c.serial)
	if err != nil {
		return nil, err
	}
	select {
	case c.bus <- struct{}{}:
	case <-ctx.Done():
		c.stats.canceled.Add(1)
		return nil, fmt.Errorf("modbus: %s: not sent, gave up waiting for the bus: %w", r, ctx.Err())
	}
	defer func() { <-c.bus }()
	if c.closed {
		return nil, fmt.Errorf("%w: %s", ErrClosed, r)
	}
	if err := ctx.Err(); err != nil {
		c.stats.canceled.Add(1)
		return nil, fmt.Errorf("modbus: %s: not sent: %w", r, err)
	}
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	data, err := c.tr.exchange(ctx, deadline, r)
	c.stats.record(err)
	return data, err
}

// Close closes the link. It waits for a request in progress to end, which
// takes at most the request's deadline. Later calls to Read return
// [ErrClosed]; Close is idempotent.
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

// request is one validated read request.
type request struct {
	slave, fc byte
	addr, qty uint16
	want      int // data bytes the reply must carry
}

func newRequest(slave, fc byte, addr, qty uint16, serialLine bool) (*request, error) {
	r := &request{slave: slave, fc: fc, addr: addr, qty: qty}
	var maxQty uint16
	switch fc {
	case gm.FuncCodeReadCoils, gm.FuncCodeReadDiscreteInputs:
		maxQty, r.want = 2000, (int(qty)+7)/8
	case gm.FuncCodeReadHoldingRegisters, gm.FuncCodeReadInputRegisters:
		maxQty, r.want = 125, 2*int(qty)
	default:
		return nil, fmt.Errorf("modbus: slave %d addr %d qty %d: function code %d is not a read (use 1, 2, 3 or 4)", slave, addr, qty, fc)
	}
	if qty < 1 || qty > maxQty {
		return nil, fmt.Errorf("modbus: %s: quantity must be 1..%d", r, maxQty)
	}
	if int(addr)+int(qty) > 0x10000 {
		return nil, fmt.Errorf("modbus: %s: range runs past address 65535", r)
	}
	if serialLine && (slave < 1 || slave > 247) {
		return nil, fmt.Errorf("modbus: %s: slave id must be 1..247 on a serial line", r)
	}
	return r, nil
}

// pdu returns the request's data after the function code: address, quantity.
func (r *request) pdu() []byte {
	return []byte{byte(r.addr >> 8), byte(r.addr), byte(r.qty >> 8), byte(r.qty)}
}

func (r *request) String() string {
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
