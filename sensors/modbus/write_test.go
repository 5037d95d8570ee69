package modbus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
)

// actuatorYAML is a device with valves and a pump on coils, and setpoints
// in holding registers: a 16-bit one at 0 and a 32-bit one, words in CDAB
// order, at 4-5. Coil 9 (the pump) starts on.
const actuatorYAML = `
model: TEST-ACT
data_type: actuator
registers:
  - {name: Valve0, area: coil, address: 0, emulate: {model: constant, min: 0}}
  - {name: Pump, area: coil, address: 9, emulate: {model: constant, min: 1, max: 1}}
  - {name: Setpoint, area: holding, address: 0, type: int16, emulate: {model: constant, min: 0}}
  - {name: Target, area: holding, address: 4, type: int32, order: CDAB, emulate: {model: constant, min: 0}}
  - {name: Level, area: holding, address: 20, emulate: {model: constant, min: 0}}
`

// pduLog records the requests an emulator received (Options.OnRequest).
type pduLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *pduLog) on(slave byte, pdu []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, pduKey(slave, pdu))
}

func pduKey(slave byte, pdu []byte) string { return fmt.Sprintf("slave %d: % x", slave, pdu) }

func (l *pduLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs...)
}

// last is the latest request received, or "" before any.
func (l *pduLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reqs) == 0 {
		return ""
	}
	return l.reqs[len(l.reqs)-1]
}

// emuBus is a Client talking to emulated actuators.
type emuBus struct {
	emu *emulator.Emulator
	c   *Client
	log *pduLog
}

// emuTransports are the transports the emulator serves over TCP.
var emuTransports = []struct {
	name string
	rtu  bool
}{{"tcp", false}, {"rtuovertcp", true}}

// actuators serves one actuator device per entry of faults, as slaves 1,
// 2, …, over Modbus TCP or RTU over TCP, with a Client on it.
func actuators(t *testing.T, rtu bool, timeout time.Duration, faults ...emulator.Faults) *emuBus {
	t.Helper()
	p, err := profile.Parse("actuator", "actuator.yaml", []byte(actuatorYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(faults) == 0 {
		faults = []emulator.Faults{{}}
	}
	var devs []emulator.Device
	for i, f := range faults {
		devs = append(devs, emulator.Device{Slave: byte(i + 1), Profile: p, Faults: f})
	}
	b := &emuBus{log: &pduLog{}}
	var addr string
	b.emu, addr = emutest.ServeDevices(t, rtu, devs, emulator.Options{Seed: 1, OnRequest: b.log.on, Logger: testtool.Logger(t)})
	scheme := "tcp"
	if rtu {
		scheme = "rtuovertcp"
	}
	b.c = openTCP(t, scheme+"://"+addr, timeout)
	return b
}

// waitForRequest waits until the device has received a request, and
// reports whether it did within hangMargin (a liveness bound, not timing).
func (b *emuBus) waitForRequest() bool {
	for end := time.Now().Add(hangMargin); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if b.log.last() != "" {
			return true
		}
	}
	return false
}

// write writes and checks that exactly pdu reached the device.
func (b *emuBus) write(t *testing.T, slave, fc byte, addr, qty uint16, data, pdu []byte) {
	t.Helper()
	if err := b.c.Write(context.Background(), slave, fc, addr, qty, data); err != nil {
		t.Fatalf("write fc %d addr %d: %v", fc, addr, err)
	}
	if got, want := b.log.last(), pduKey(slave, pdu); got != want {
		t.Fatalf("write fc %d addr %d: the device received %s, want %s", fc, addr, got, want)
	}
}

// read reads and compares byte for byte.
func (b *emuBus) read(t *testing.T, slave, fc byte, addr, qty uint16, want []byte) {
	t.Helper()
	got, err := b.c.Read(context.Background(), slave, fc, addr, qty)
	if err != nil {
		t.Fatalf("read fc %d addr %d qty %d: %v", fc, addr, qty, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read fc %d addr %d qty %d: got % x, want % x", fc, addr, qty, got, want)
	}
}

// TestWriteEmulator writes every function over both TCP transports, checks
// the bytes the device received and reads each write back.
func TestWriteEmulator(t *testing.T) {
	for _, tr := range emuTransports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			b := actuators(t, tr.rtu, time.Second)

			// fc 5: true is FF 00, false is 00 00, and is sent, not skipped.
			b.read(t, 1, 1, 0, 10, []byte{0x00, 0x02}) // pump (coil 9) on
			b.write(t, 1, 5, 0, 1, []byte{0xFF, 0x00}, []byte{5, 0, 0, 0xFF, 0x00})
			b.write(t, 1, 5, 9, 1, []byte{0x00, 0x00}, []byte{5, 0, 9, 0x00, 0x00})
			b.read(t, 1, 1, 0, 10, []byte{0x01, 0x00})

			// fc 6.
			b.write(t, 1, 6, 0, 1, []byte{0xFF, 0x38}, []byte{6, 0, 0, 0xFF, 0x38}) // -200
			b.read(t, 1, 3, 0, 1, []byte{0xFF, 0x38})

			// fc 15: 10 coils from 2, LSB first: 2, 4, 8, 11 on.
			bits := []byte{0b0100_0101, 0b10}
			b.write(t, 1, 15, 2, 10, bits, []byte{15, 0, 2, 0, 10, 2, 0b0100_0101, 0b10})
			b.read(t, 1, 1, 2, 10, bits)
			b.read(t, 1, 1, 0, 16, []byte{0b0001_0101, 0b0000_1001}) // coil 0 still on, pump off

			// fc 16: -123456 = 0xFFFE1DC0 as a CDAB int32 (low word
			// first), then a third register.
			words := []byte{0x1D, 0xC0, 0xFF, 0xFE, 0x00, 0x2A}
			b.write(t, 1, 16, 4, 3, words, append([]byte{16, 0, 4, 0, 3, 6}, words...))
			b.read(t, 1, 3, 4, 3, words)
			v := b.emu.Values(1, time.Now())
			if v["Target"] != -123456 || v["Setpoint"] != -200 || v["Valve0"] != 1 || v["Pump"] != 0 {
				t.Errorf("the device decodes %v, want Target -123456, Setpoint -200, Valve0 1, Pump 0", v)
			}

			st := b.c.Stats()
			if st.Writes != 5 || st.Requests != 11 || st.Responses != 11 || st.Exceptions != 0 {
				t.Errorf("stats %+v, want 5 writes of 11 requests, 11 responses", st)
			}
		})
	}
}

// TestWriteBroadcast: slave 0 on a serial line (here behind a device
// server) reaches every device, gets no reply, and holds the bus for the
// turnaround delay.
func TestWriteBroadcast(t *testing.T) {
	b := actuators(t, true, time.Second, emulator.Faults{}, emulator.Faults{})
	start := time.Now()
	if err := b.c.Write(context.Background(), 0, 6, 20, 1, []byte{0x12, 0x34}); err != nil {
		t.Fatalf("broadcast: %v", err)
	}
	if d := time.Since(start); d < BroadcastTurnaround {
		t.Errorf("broadcast returned after %v, before the turnaround of %v", d, BroadcastTurnaround)
	}
	if got, want := b.log.all(), []string{pduKey(0, []byte{6, 0, 20, 0x12, 0x34})}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("the line carried %q, want %q", got, want)
	}
	for _, slave := range []byte{1, 2} {
		b.read(t, slave, 3, 20, 1, []byte{0x12, 0x34})
	}
	if st := b.c.Stats(); st.Broadcasts != 1 || st.Writes != 1 || st.Responses != 2 || st.Timeouts != 0 {
		t.Errorf("stats %+v, want 1 broadcast write and 2 responses", st)
	}
	// A read is never broadcast.
	if _, err := b.c.Read(context.Background(), 0, 3, 20, 1); err == nil || !errors.Is(err, ErrNotSent) {
		t.Errorf("broadcast read: %v, want a refusal", err)
	}
}

// TestWriteOutcomes: what each write fault of the emulator makes of a
// write, settled or not, and that reading back settles what is not.
func TestWriteOutcomes(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, tr := range emuTransports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			b := actuators(t, tr.rtu, timeout,
				emulator.Faults{RefuseWrites: true},
				emulator.Faults{DropWriteReplies: true},
				emulator.Faults{WriteReplyDelay: 3 * timeout},
				emulator.Faults{ClampWrite: emulator.ClampRange(0, 100)},
			)
			ctx := context.Background()

			// Refused: a settled failure, nothing stored.
			err := b.c.Write(ctx, 1, 6, 0, 1, []byte{0, 50})
			var me *gm.ModbusError
			if !errors.As(err, &me) || me.ExceptionCode != gm.ExceptionCodeIllegalDataValue || unsettled(err) || errors.Is(err, ErrNotSent) {
				t.Fatalf("refused write: %v (unsettled %v), want a settled exception 3", err, unsettled(err))
			}
			b.read(t, 1, 3, 0, 1, []byte{0, 0})

			// Reply dropped: unsettled; reading back shows it took effect.
			err = b.c.Write(ctx, 2, 6, 0, 1, []byte{0, 51})
			if !errors.Is(err, ErrTimeout) || !unsettled(err) {
				t.Fatalf("write whose reply is dropped: %v (unsettled %v), want an unsettled ErrTimeout", err, unsettled(err))
			}
			b.read(t, 2, 3, 0, 1, []byte{0, 51})

			// Reply later than the timeout: unsettled; reading back shows
			// it took effect. On an RTU stream, which the Client keeps
			// after a timeout, the device answers the read back only
			// after the late echo, which the read back may meet: such
			// reads fail and are tried again, as a caller would.
			err = b.c.Write(ctx, 3, 6, 0, 1, []byte{0, 52})
			if !errors.Is(err, ErrTimeout) || !unsettled(err) {
				t.Fatalf("write answered late: %v (unsettled %v), want an unsettled ErrTimeout", err, unsettled(err))
			}
			for i := 0; ; i++ {
				got, err := b.c.Read(ctx, 3, 3, 0, 1)
				if (errors.Is(err, ErrUnexpectedReply) || errors.Is(err, ErrTimeout)) && tr.rtu && i < 10 {
					t.Logf("read back %d: %v", i, err)
					continue
				}
				if err != nil || !bytes.Equal(got, []byte{0, 52}) {
					t.Fatalf("read back after the late reply: % x, %v; want 00 34", got, err)
				}
				break
			}

			// Clamped: the device echoes, so the write is settled as done;
			// only reading back shows what it stored.
			if err := b.c.Write(ctx, 4, 16, 0, 1, []byte{0x01, 0x00}); err != nil {
				t.Fatalf("clamped write: %v", err)
			}
			b.read(t, 4, 3, 0, 1, []byte{0, 100})
		})
	}
}

// TestWriteNotSent: every way a write can fail before the wire is ErrNotSent,
// and the device never sees it.
func TestWriteNotSent(t *testing.T) {
	b := actuators(t, true, 2*time.Second, emulator.Faults{WriteReplyDelay: 300 * time.Millisecond})
	ctx := context.Background()
	write := []byte{6, 0, 0, 0, 7}

	// Waiting for the bus behind a write whose reply takes 300 ms.
	first := make(chan error, 1)
	go func() { first <- b.c.Write(ctx, 1, 6, 0, 1, []byte{0, 7}) }()
	if !b.waitForRequest() {
		t.Fatal("the first write never reached the device")
	}
	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := b.c.Write(wait, 1, 6, 0, 1, []byte{0, 8})
	cancel()
	if !errors.Is(err, ErrNotSent) || unsettled(err) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for the bus") {
		t.Fatalf("write queued behind another: %v, want ErrNotSent after giving up waiting for the bus", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the write holding the bus: %v", err)
	}

	// ctx done before sending.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.c.Write(done, 1, 6, 0, 1, []byte{0, 9}); !errors.Is(err, ErrNotSent) || !errors.Is(err, context.Canceled) || unsettled(err) {
		t.Fatalf("canceled ctx: %v, want ErrNotSent", err)
	}
	if got, want := b.log.all(), []string{pduKey(1, write)}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("the device received %q, want only %q", got, want)
	}

	// Closed.
	_ = b.c.Close()
	if err := b.c.Write(ctx, 1, 6, 0, 1, []byte{0, 9}); !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrClosed) {
		t.Fatalf("closed client: %v, want ErrNotSent and ErrClosed", err)
	}

	// Dial refused.
	addr := testtool.RefusedAddr(t) // nothing listens there
	for _, scheme := range []string{"tcp", "rtuovertcp"} {
		c := openTCP(t, scheme+"://"+addr, time.Second)
		if err := c.Write(ctx, 1, 6, 0, 1, []byte{0, 9}); !errors.Is(err, ErrNotSent) || unsettled(err) {
			t.Errorf("%s, dial refused: %v, want ErrNotSent", scheme, err)
		}
	}
}

// TestWriteAbandonedIsUnsettled: a write whose ctx ends while its reply is
// awaited may have been executed.
func TestWriteAbandonedIsUnsettled(t *testing.T) {
	for _, tr := range emuTransports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			b := actuators(t, tr.rtu, 10*time.Second, emulator.Faults{DropWriteReplies: true})
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				b.waitForRequest()
				cancel()
			}()
			err := b.c.Write(ctx, 1, 5, 0, 1, []byte{0xFF, 0})
			if !errors.Is(err, context.Canceled) || !unsettled(err) {
				t.Fatalf("got %v (unsettled %v), want an unsettled context.Canceled", err, unsettled(err))
			}
			b.read(t, 1, 1, 0, 1, []byte{1})
		})
	}
}

// TestWriteValidation: malformed writes are refused before the wire with
// a message that names what is wrong.
func TestWriteValidation(t *testing.T) {
	c := NewRTU(failLink{t}, 9600, Options{})
	tests := []struct {
		slave, fc byte
		addr, qty uint16
		data      []byte
		want      string
	}{
		{1, 3, 0, 1, []byte{0, 1}, "function code 3 is not a write"},
		{1, 7, 0, 1, []byte{0, 1}, "function code 7 is not a write"},
		{1, 5, 0, 1, []byte{0x12, 0x34}, "ff 00 (on) or 00 00 (off)"},
		{1, 5, 0, 1, []byte{0x00, 0xFF}, "ff 00 (on) or 00 00 (off)"},
		{1, 5, 0, 1, []byte{0xFF}, "1 data bytes, want 2"},
		{1, 5, 0, 2, []byte{0xFF, 0}, "quantity must be 1 for a single write"},
		{1, 6, 0, 0, []byte{0, 1}, "quantity must be 1 for a single write"},
		{1, 6, 0, 1, nil, "0 data bytes, want 2"},
		{1, 6, 0, 1, []byte{0, 1, 2}, "3 data bytes, want 2"},
		{1, 15, 0, 0, nil, "quantity must be 1..1968"},
		{1, 15, 0, 1969, make([]byte, 247), "quantity must be 1..1968"},
		{1, 15, 0, 9, []byte{0xFF}, "1 data bytes, want 2"},
		{1, 15, 0, 9, []byte{0xFF, 0x03}, "bits set past the last coil"},
		{1, 15, 0, 3, []byte{0x08}, "bits set past the last coil"},
		{1, 16, 0, 0, nil, "quantity must be 1..123"},
		{1, 16, 0, 124, make([]byte, 248), "quantity must be 1..123"},
		{1, 16, 0, 2, []byte{0, 1, 0}, "3 data bytes, want 4"},
		{1, 16, 65535, 2, make([]byte, 4), "past address 65535"},
		{1, 15, 65530, 8, []byte{0}, "past address 65535"},
		{248, 6, 0, 1, []byte{0, 1}, "slave id must be 1..247, or 0 to broadcast a write"},
	}
	for _, tt := range tests {
		err := c.Write(context.Background(), tt.slave, tt.fc, tt.addr, tt.qty, tt.data)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "modbus: ") {
			t.Errorf("Write(slave %d, fc %d, addr %d, qty %d, % x) = %v, want an error containing %q",
				tt.slave, tt.fc, tt.addr, tt.qty, tt.data, err, tt.want)
		}
		if !errors.Is(err, ErrNotSent) || unsettled(err) {
			t.Errorf("Write(slave %d, fc %d, addr %d, qty %d): %v is not ErrNotSent", tt.slave, tt.fc, tt.addr, tt.qty, err)
		}
	}
	if st := c.Stats(); st != (Stats{}) {
		t.Errorf("rejected requests were counted: %+v", st)
	}
	// The limits themselves are accepted: they reach the line (here one
	// on which nobody answers).
	c = NewRTU(&replayLink{chunk: 1}, 115200, Options{Timeout: time.Millisecond})
	for _, w := range []struct {
		fc   byte
		qty  uint16
		data []byte
	}{{15, 1968, make([]byte, 246)}, {16, 123, make([]byte, 246)}, {15, 7, []byte{0x7F}}, {5, 1, []byte{0, 0}}} {
		if err := c.Write(context.Background(), 1, w.fc, 0, w.qty, w.data); !errors.Is(err, ErrTimeout) {
			t.Errorf("fc %d qty %d: %v, want it sent (and then ErrTimeout)", w.fc, w.qty, err)
		}
	}
}

func TestUnsettled(t *testing.T) {
	r := &request{slave: 1, fc: 6, addr: 0, qty: 1, data: []byte{0, 1}}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{r.exception(0x86, 3), false},
		{notSent(fmt.Errorf("modbus: %s: %w", r, ErrLineBusy)), false},
		{fmt.Errorf("wrapped again: %w", notSent(errors.New("dial: refused"))), false},
		{fmt.Errorf("%w: %s", ErrTimeout, r), true},
		{fmt.Errorf("%w: %s", ErrCRC, r), true},
		{fmt.Errorf("%w: %s", ErrShortFrame, r), true},
		{fmt.Errorf("%w: %s", ErrUnexpectedReply, r), true},
		{fmt.Errorf("modbus: %s: abandoned: %w", r, context.Canceled), true},
		{errors.New("an error of a kind never seen"), true},
	} {
		if got := unsettled(c.err); got != c.want {
			t.Errorf("unsettled(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// ErrNotSent is added, not substituted: the message and the kind stay.
	inner := fmt.Errorf("%w: %s: not sent: 3 bytes kept arriving", ErrLineBusy, r)
	if e := notSent(inner); e.Error() != inner.Error() || !errors.Is(e, ErrLineBusy) || !errors.Is(e, ErrNotSent) {
		t.Errorf("notSent(%v) = %v", inner, e)
	}
}

// TestWritesShareTheBus: writes and reads from several goroutines on one
// RTU stream never overlap: a frame sent into another would reach the
// device garbled and fail both.
func TestWritesShareTheBus(t *testing.T) {
	b := actuators(t, true, 2*time.Second)
	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan error, 4*rounds)
	for g := range 2 {
		wg.Go(func() {
			for i := range rounds {
				v := []byte{byte(g), byte(i), 0, byte(i)}
				if err := b.c.Write(context.Background(), 1, 16, 8+2*uint16(g), 2, v); err != nil {
					errs <- err
				}
			}
		})
		wg.Go(func() {
			for range rounds {
				if _, err := b.c.Read(context.Background(), 1, 3, 0, 16); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := b.emu.Stats(); s.Garbage != 0 || s.Slaves[1].Writes != 2*rounds {
		t.Errorf("emulator stats %+v, want %d writes and no garbage", s, 2*rounds)
	}
	b.read(t, 1, 3, 8, 4, []byte{0, rounds - 1, 0, rounds - 1, 1, rounds - 1, 0, rounds - 1})
}
