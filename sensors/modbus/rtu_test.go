package modbus

import (
	"bytes"
	"context"
	"errors"
	"fieldlink/internal/testtool"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"
)

func TestRTURead(t *testing.T) {
	c := pipeClient(t, 19200, time.Second, model)
	tests := []struct {
		fc        byte
		addr, qty uint16
		wantLen   int
	}{
		{fc: 3, addr: 0, qty: 1, wantLen: 2},
		{fc: 3, addr: 100, qty: 10, wantLen: 20},
		{fc: 3, addr: 65535 - 124, qty: 125, wantLen: 250},
		{fc: 4, addr: 7, qty: 3, wantLen: 6},
		{fc: 1, addr: 0, qty: 1, wantLen: 1},
		{fc: 1, addr: 5, qty: 19, wantLen: 3},
		{fc: 1, addr: 0, qty: 2000, wantLen: 250},
		{fc: 2, addr: 3, qty: 16, wantLen: 2},
		{fc: 2, addr: 1, qty: 9, wantLen: 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("fc%d_addr%d_qty%d", tt.fc, tt.addr, tt.qty), func(t *testing.T) {
			got, err := c.Read(context.Background(), 1, tt.fc, tt.addr, tt.qty)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.wantLen {
				t.Fatalf("got %d bytes, want %d", len(got), tt.wantLen)
			}
			if want := modelData(tt.fc, tt.addr, tt.qty); !bytes.Equal(got, want) {
				t.Fatalf("got % x\nwant % x", got, want)
			}
		})
	}
	st := c.Stats()
	if st.Requests != uint64(len(tests)) || st.Responses != uint64(len(tests)) {
		t.Errorf("stats %+v: want %d requests and responses", st, len(tests))
	}
	if st.BytesSent != 8*uint64(len(tests)) {
		t.Errorf("BytesSent = %d, want %d", st.BytesSent, 8*len(tests))
	}
}

// TestRTUFaults sends one request that meets a fault, then one that must
// succeed: no fault may poison the bus for the next request.
func TestRTUFaults(t *testing.T) {
	const timeout = 100 * time.Millisecond
	corrupt := func(b []byte) []byte { b[len(b)-1] ^= 0x55; return b }
	tests := []struct {
		name    string
		fault   func(req []byte) []byte
		wantErr error // sentinel, or nil for an exception
		wantExc byte  // exception code, when wantErr is nil
		kind    func(Stats) uint64
		slow    bool // the fault costs the full timeout
	}{
		{name: "exception", fault: func(req []byte) []byte { return withCRC(req[0], req[1]|0x80, 2) },
			wantExc: 2, kind: func(s Stats) uint64 { return s.Exceptions }},
		{name: "exception_bad_crc", fault: func(req []byte) []byte { return corrupt(withCRC(req[0], req[1]|0x80, 2)) },
			wantErr: ErrCRC, kind: func(s Stats) uint64 { return s.CRCErrors }},
		{name: "bad_crc", fault: func(req []byte) []byte { return corrupt(modelRTU(req)) },
			wantErr: ErrCRC, kind: func(s Stats) uint64 { return s.CRCErrors }},
		{name: "data_bit_flip", fault: func(req []byte) []byte { r := modelRTU(req); r[4] ^= 1; return r },
			wantErr: ErrCRC, kind: func(s Stats) uint64 { return s.CRCErrors }},
		{name: "stops_half_way", fault: func(req []byte) []byte { return modelRTU(req)[:6] },
			wantErr: ErrShortFrame, kind: func(s Stats) uint64 { return s.FrameErrors }, slow: true},
		{name: "stops_after_two_bytes", fault: func(req []byte) []byte { return modelRTU(req)[:2] },
			wantErr: ErrShortFrame, kind: func(s Stats) uint64 { return s.FrameErrors }, slow: true},
		{name: "silent", fault: func([]byte) []byte { return nil },
			wantErr: ErrTimeout, kind: func(s Stats) uint64 { return s.Timeouts }, slow: true},
		{name: "garbage", fault: func([]byte) []byte { return []byte("hello, world\r\n") },
			wantErr: ErrUnexpectedReply, kind: func(s Stats) uint64 { return s.FrameErrors }},
		{name: "wrong_slave", fault: func(req []byte) []byte { return modelRTU(append([]byte{7}, req[1:]...)) },
			wantErr: ErrLateReply, kind: func(s Stats) uint64 { return s.FrameErrors }},
		{name: "wrong_function", fault: func(req []byte) []byte { q := append([]byte(nil), req...); q[1] = 4; return modelRTU(q) },
			wantErr: ErrUnexpectedReply, kind: func(s Stats) uint64 { return s.FrameErrors }},
		{name: "wrong_byte_count", fault: func(req []byte) []byte { q := append([]byte(nil), req...); q[5]++; return modelRTU(q) },
			wantErr: ErrUnexpectedReply, kind: func(s Stats) uint64 { return s.FrameErrors }},
		{name: "exception_from_other_slave", fault: func(req []byte) []byte { return withCRC(9, req[1]|0x80, 4) },
			wantErr: ErrLateReply, kind: func(s Stats) uint64 { return s.FrameErrors }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A fault that needs no deadline to be seen is judged at
			// once: with a deadline an hour away, a client that waited
			// for it would hang, and go test's -timeout names the test.
			tmo := timeout
			if !tt.slow {
				tmo = time.Hour
			}
			c := pipeClient(t, 115200, tmo, firstThen(tt.fault))
			start := time.Now()
			_, err := c.Read(context.Background(), 1, 3, 100, 10)
			elapsed := time.Since(start)
			if err == nil {
				t.Fatal("fault not detected")
			}
			t.Logf("error: %v", err)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
			} else {
				var me *gm.ModbusError
				if !errors.As(err, &me) {
					t.Fatalf("got %v, want a *gm.ModbusError", err)
				}
				if me.ExceptionCode != tt.wantExc || me.FunctionCode != 0x83 {
					t.Fatalf("got exception %d for function %#x, want %d for 0x83", me.ExceptionCode, me.FunctionCode, tt.wantExc)
				}
			}
			for _, part := range []string{"slave 1", "fc 3", "addr 100", "qty 10"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("message %q does not name %q", err, part)
				}
			}
			// A load can only make it later: no upper bound.
			if tt.slow && elapsed < timeout-10*time.Millisecond {
				t.Errorf("took %v, want at least the %v timeout", elapsed, timeout)
			}
			if n := tt.kind(c.Stats()); n != 1 {
				t.Errorf("stats %+v: the fault's kind counted %d times, want 1", c.Stats(), n)
			}

			got, err := c.Read(context.Background(), 1, 3, 200, 2)
			if err != nil {
				t.Fatalf("bus did not recover: %v", err)
			}
			if want := modelData(3, 200, 2); !bytes.Equal(got, want) {
				t.Fatalf("after the fault got % x, want % x", got, want)
			}
		})
	}
}

// TestRTULateReply: a well-formed reply from the slave of a request that
// timed out, read while the next slave's reply is awaited, is a late reply
// from that slave, not a garbled one: a device is there, slower than the
// timeout, and nothing on the line was broken.
func TestRTULateReply(t *testing.T) {
	c := pipeClient(t, 115200, 100*time.Millisecond, func(n int, req []byte) []byte {
		if n == 0 {
			return nil // slave 1 has not answered yet
		}
		return modelRTU(append([]byte{1}, req[1:]...)) // now it does
	})
	if _, err := c.Read(context.Background(), 1, 3, 100, 1); !errors.Is(err, ErrTimeout) {
		t.Fatalf("the first read: %v, want a timeout", err)
	}
	_, err := c.Read(context.Background(), 2, 3, 100, 1)
	t.Logf("error: %v", err)
	var late *LateReplyError
	if !errors.As(err, &late) || !errors.Is(err, ErrLateReply) {
		t.Fatalf("got %v, want a late reply from slave 1", err)
	}
	if late.Slave != 1 || late.After <= 0 {
		t.Errorf("late reply from slave %d after %v, want slave 1 after its request", late.Slave, late.After)
	}
	if errors.Is(err, ErrCRC) || errors.Is(err, ErrShortFrame) {
		t.Errorf("a well-formed reply is called garbled: %v", err)
	}
	if !strings.Contains(err.Error(), "late reply from slave 1") || !strings.Contains(err.Error(), "slave 2") {
		t.Errorf("message %q does not say slave 1 answered late to the request to slave 2", err)
	}
	if st := c.Stats(); st.CRCErrors != 0 || st.FrameErrors != 1 || st.Timeouts != 1 {
		t.Errorf("stats %+v: want one timeout and one frame error, no CRC error", st)
	}
}

// TestRTULateReplyCut: a late reply cut short by the deadline of the
// request it was read in (its slave and function code are the unanswered
// request's) is a late reply from that slave, not a frame stopped mid-way.
func TestRTULateReplyCut(t *testing.T) {
	c := pipeClient(t, 115200, 100*time.Millisecond, func(n int, req []byte) []byte {
		if n == 0 {
			return nil
		}
		return modelRTU(append([]byte{1}, req[1:]...))[:3] // the rest after the deadline
	})
	if _, err := c.Read(context.Background(), 1, 3, 100, 1); !errors.Is(err, ErrTimeout) {
		t.Fatalf("the first read: %v, want a timeout", err)
	}
	_, err := c.Read(context.Background(), 2, 3, 100, 1)
	t.Logf("error: %v", err)
	var late *LateReplyError
	if !errors.As(err, &late) || late.Slave != 1 || !late.Cut {
		t.Fatalf("got %v, want a late reply from slave 1, cut short", err)
	}
	if errors.Is(err, ErrCRC) || errors.Is(err, ErrShortFrame) {
		t.Errorf("a late reply cut by the deadline is called garbled: %v", err)
	}
}

// TestRTUGarbageTail checks that bytes trailing a good reply are not taken
// as the start of the next reply.
func TestRTUGarbageTail(t *testing.T) {
	tail := []byte{0x01, 0x03, 0x02, 0xde, 0xad} // looks like the start of a reply
	c := pipeClient(t, 115200, time.Second, func(n int, req []byte) []byte {
		return append(modelRTU(req), tail...)
	})
	for i := range 3 {
		got, err := c.Read(context.Background(), 1, 3, uint16(i), 1)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if want := modelData(3, uint16(i), 1); !bytes.Equal(got, want) {
			t.Fatalf("read %d: got % x, want % x", i, got, want)
		}
	}
	if st := c.Stats(); st.Discarded != 2*uint64(len(tail)) {
		t.Errorf("Discarded = %d, want %d", st.Discarded, 2*len(tail))
	}
}

// TestRTUStaleInputDiscarded uses a buffered line, where bytes really sit
// in the receive buffer: noise before the first request, and a late reply
// to a request that timed out, which would pass every check if it were read
// as the next reply.
func TestRTUStaleInputDiscarded(t *testing.T) {
	master, slave := bufferedLine(t)
	c := NewRTU(master, 115200, Options{Timeout: 100 * time.Millisecond, Logger: testtool.Logger(t)})
	timedOut := make(chan struct{})
	lateWritten := make(chan struct{})
	lateReply := withCRC(1, 3, 2, 0xde, 0xad)
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveRTU(t, slave, func(n int, req []byte) []byte {
			if n == 0 {
				<-timedOut
				if _, err := slave.Write(lateReply); err != nil {
					t.Error(err)
				}
				close(lateWritten)
				return nil
			}
			return modelRTU(req)
		})
	}()
	t.Cleanup(func() {
		_ = c.Close()
		_ = slave.Close()
		<-done
	})

	noise := []byte{0x00, 0xff, 0x01, 0x03}
	if _, err := slave.Write(noise); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(context.Background(), 1, 3, 0, 1); !errors.Is(err, ErrTimeout) {
		t.Fatalf("first read: got %v, want ErrTimeout", err)
	}
	close(timedOut)
	<-lateWritten
	got, err := c.Read(context.Background(), 1, 3, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := modelData(3, 0, 1); !bytes.Equal(got, want) {
		t.Fatalf("got % x, want % x (the late reply was % x)", got, want, lateReply)
	}
	if st := c.Stats(); st.Discarded != uint64(len(noise)+len(lateReply)) {
		t.Errorf("Discarded = %d, want %d", st.Discarded, len(noise)+len(lateReply))
	}
}

// TestRTUSilence checks that a request never starts within t3.5 of the
// previous reply's last byte.
func TestRTUSilence(t *testing.T) {
	const baud = 1200 // t3.5 = 32 ms, large against scheduling noise
	var mu sync.Mutex
	var replied time.Time
	var gaps []time.Duration
	c := pipeClient(t, baud, time.Second, func(n int, req []byte) []byte {
		mu.Lock()
		if n > 0 {
			gaps = append(gaps, time.Since(replied))
		}
		mu.Unlock()
		return modelRTU(req)
	})
	// Record the reply time after the pipe delivered the reply, which is
	// when the client's read returns.
	for range 4 {
		if _, err := c.Read(context.Background(), 1, 3, 0, 1); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		replied = time.Now()
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	want := Silence(baud) - 2*time.Millisecond
	for i, g := range gaps {
		if g < want {
			t.Errorf("gap before request %d = %v, want at least t3.5 = %v", i+1, g, Silence(baud))
		}
	}
	if len(gaps) != 3 {
		t.Fatalf("measured %d gaps, want 3", len(gaps))
	}
}

func TestRTUConcurrentCallers(t *testing.T) {
	c := pipeClient(t, 115200, time.Second, model)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				slave, addr := byte(g+1), uint16(100*g+i)
				got, err := c.Read(context.Background(), slave, 3, addr, 2)
				if err != nil {
					t.Errorf("slave %d addr %d: %v", slave, addr, err)
					return
				}
				if want := modelData(3, addr, 2); !bytes.Equal(got, want) {
					t.Errorf("slave %d addr %d: got % x, want % x", slave, addr, got, want)
				}
			}
		})
	}
	wg.Wait()
	if st := c.Stats(); st.Requests != 80 || st.Responses != 80 {
		t.Errorf("stats %+v, want 80 requests and responses", st)
	}
}

func TestRTUCancel(t *testing.T) {
	received := make(chan struct{}, 1)
	c := pipeClient(t, 115200, 10*time.Second, func(n int, req []byte) []byte {
		if n == 0 {
			received <- struct{}{}
			return nil // silent; only the cancellation can end the wait
		}
		return modelRTU(req)
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-received
		cancel()
	}()
	// The deadline is 10 s away: only the cancellation ends the read
	// with context.Canceled.
	_, err := c.Read(ctx, 1, 3, 0, 1)
	if !errors.Is(err, context.Canceled) || !unsettled(err) {
		t.Fatalf("got %v, want context.Canceled, unsettled (the request was sent)", err)
	}
	if _, err := c.Read(context.Background(), 1, 3, 0, 1); err != nil {
		t.Fatalf("after cancellation: %v", err)
	}
	if _, err := c.Read(ctx, 1, 3, 0, 1); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotSent) {
		t.Fatalf("canceled ctx: got %v, want context.Canceled, not sent", err)
	}
	if st := c.Stats(); st.Canceled != 2 || st.Requests != 2 {
		t.Errorf("stats %+v, want 2 canceled of which 1 sent", st)
	}
}

func TestRTUContextDeadlineWins(t *testing.T) {
	c := pipeClient(t, 115200, 10*time.Second, func(int, []byte) []byte { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// The client's own timeout is 10 s away: only ctx's deadline ends
	// the read with context.DeadlineExceeded.
	_, err := c.Read(ctx, 1, 3, 0, 1)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrTimeout and context.DeadlineExceeded", err)
	}
}

// failLink fails the test on any I/O: for requests that must be rejected
// before touching the line.
type failLink struct{ t *testing.T }

func (l failLink) Read([]byte) (int, error) { l.t.Error("unexpected Read"); return 0, errors.New("no") }
func (l failLink) Write([]byte) (int, error) {
	l.t.Error("unexpected Write")
	return 0, errors.New("no")
}
func (l failLink) Close() error                    { return nil }
func (l failLink) SetReadDeadline(time.Time) error { return nil }

func TestReadValidation(t *testing.T) {
	c := NewRTU(failLink{t}, 9600, Options{})
	tests := []struct {
		slave, fc byte
		addr, qty uint16
		want      string
	}{
		{1, 5, 0, 1, "function code 5 is not a read"},
		{1, 16, 0, 1, "function code 16"},
		{1, 7, 0, 1, "function code 7 is not a read"},
		{1, 3, 0, 0, "quantity must be 1..125"},
		{1, 3, 0, 126, "quantity must be 1..125"},
		{1, 4, 0, 126, "quantity must be 1..125"},
		{1, 1, 0, 2001, "quantity must be 1..2000"},
		{1, 2, 0, 0, "quantity must be 1..2000"},
		{1, 3, 65535, 2, "past address 65535"},
		{1, 1, 65000, 1000, "past address 65535"},
		{0, 3, 0, 1, "slave id must be 1..247"},
		{248, 3, 0, 1, "slave id must be 1..247"},
	}
	for _, tt := range tests {
		_, err := c.Read(context.Background(), tt.slave, tt.fc, tt.addr, tt.qty)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "modbus: ") || !errors.Is(err, ErrNotSent) {
			t.Errorf("Read(slave %d, fc %d, addr %d, qty %d) = %v, want an ErrNotSent containing %q",
				tt.slave, tt.fc, tt.addr, tt.qty, err, tt.want)
		}
	}
	if st := c.Stats(); st != (Stats{}) {
		t.Errorf("rejected requests were counted: %+v", st)
	}
}

func TestClose(t *testing.T) {
	c := pipeClient(t, 9600, time.Second, model)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Read(context.Background(), 1, 3, 0, 1); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotSent) {
		t.Fatalf("Read after Close: %v, want ErrClosed, not sent", err)
	}
}

func TestCharTimeAndSilence(t *testing.T) {
	us := func(f float64) time.Duration { return time.Duration(f * float64(time.Microsecond)) }
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"CharTime(9600, 11)", CharTime(9600, 11), us(1145.833)},
		{"CharTime(9600, 10)", CharTime(9600, 10), us(1041.666)},
		{"CharTime(19200, 11)", CharTime(19200, 11), us(572.916)},
		{"CharTime(38400, 11)", CharTime(38400, 11), us(286.458)},
		{"CharTime(0, 11)", CharTime(0, 11), 0},
		{"Silence(9600)", Silence(9600), us(4010.416)},
		{"Silence(19200)", Silence(19200), us(2005.208)},
		{"Silence(1200)", Silence(1200), us(32083.333)},
		{"Silence(19201)", Silence(19201), 1750 * time.Microsecond},
		{"Silence(38400)", Silence(38400), 1750 * time.Microsecond},
		{"Silence(115200)", Silence(115200), 1750 * time.Microsecond},
	}
	for _, tt := range tests {
		if d := tt.got - tt.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// TestWaitForBusHonoursContext: a caller queued behind a request in
// progress gives up when its ctx ends, without disturbing that request.
func TestWaitForBusHonoursContext(t *testing.T) {
	received, release := make(chan struct{}), make(chan struct{})
	c := pipeClient(t, 115200, 10*time.Second, func(n int, req []byte) []byte {
		if n == 0 {
			close(received)
			<-release
		}
		return modelRTU(req)
	})
	first := make(chan error, 1)
	go func() {
		_, err := c.Read(context.Background(), 1, 3, 0, 1)
		first <- err
	}()
	<-received
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Read(ctx, 2, 3, 0, 1)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for the bus") {
		t.Fatalf("queued read: got %v, want it to give up waiting for the bus", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the request holding the bus: %v", err)
	}
	if st := c.Stats(); st.Requests != 1 || st.Responses != 1 || st.Canceled != 1 {
		t.Errorf("stats %+v", st)
	}
}
