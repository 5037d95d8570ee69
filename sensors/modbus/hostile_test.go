package modbus

import (
	"bytes"
	"context"
	"errors"
	"fieldlink/internal/testtool"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"
)

// A slave that answers wrongly and then keeps talking: its own request
// reads the line out until the deadline and says so; a request while it
// still talks is not sent (ErrLineBusy); once it stops, requests work again.
func TestRTUBabblerIsCutOffAndLineBusyIsReported(t *testing.T) {
	// The babble is timed by the scheduler: on a loaded machine (qemu in
	// CI) a stall of the babbling goroutine or of the pipe longer than
	// babbleQuiet really is a quiet line, and the request then goes out.
	// Three tries: a transport that never reports a busy line fails all.
	var errs []error
	for range 3 {
		err := babblerOnce(t)
		if err == nil {
			return
		}
		t.Logf("try %d: %v", len(errs)+1, err)
		errs = append(errs, err)
	}
	t.Fatalf("three tries failed: %v", errors.Join(errs...))
}

func babblerOnce(t *testing.T) error {
	master, slave := bufferedLine(t)
	c := NewRTU(master, 115200, Options{Timeout: 100 * time.Millisecond, Logger: testtool.Logger(t)})
	var requests atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveRTU(t, slave, func(n int, req []byte) []byte {
			requests.Add(1)
			if n > 0 {
				return modelRTU(req)
			}
			// A reply to another function, then 400 ms of babble.
			if _, err := slave.Write(withCRC(req[0], 4, 2, 0, 0)); err != nil {
				return nil
			}
			for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); {
				if _, err := slave.Write([]byte{0x55, 0xaa}); err != nil {
					return nil
				}
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	}()
	defer func() {
		_ = c.Close()
		_ = slave.Close()
		<-done
	}()

	_, err := c.Read(context.Background(), 1, 3, 0, 1)
	if !errors.Is(err, ErrUnexpectedReply) || !strings.Contains(err.Error(), "still busy at the deadline") {
		return fmt.Errorf("first read: got %v, want ErrUnexpectedReply that says the line stayed busy", err)
	}
	busy := 0
	for i := 0; ; i++ {
		if i == 50 {
			return fmt.Errorf("no success in 50 reads after the babble; last error %v", err)
		}
		var got []byte
		got, err = c.Read(context.Background(), 1, 3, 0, 1)
		if errors.Is(err, ErrLineBusy) {
			busy++
			if !strings.Contains(err.Error(), "not sent") || !errors.Is(err, ErrNotSent) {
				return fmt.Errorf("ErrLineBusy does not say the request was not sent: %v", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("read %d: %v", i, err)
		}
		if want := modelData(3, 0, 1); !bytes.Equal(got, want) {
			return fmt.Errorf("got % x, want % x", got, want)
		}
		break
	}
	if busy == 0 {
		return errors.New("no request was held back while the slave babbled")
	}
	if n := requests.Load(); n != 2 {
		return fmt.Errorf("the slave saw %d requests: a request was sent into the babble", n)
	}
	if st := c.Stats(); st.FrameErrors != uint64(1+busy) || st.Discarded == 0 {
		return fmt.Errorf("stats %+v: want %d frame errors and discarded bytes", st, 1+busy)
	}
	return nil
}

// A Modbus TCP reply followed by bytes its header did not announce is not
// trusted, and the next request goes out on a fresh connection.
func TestTCPTrailingBytesAreNotTrusted(t *testing.T) {
	s := startTCPServer(t, false, func(n int, req []byte) []byte {
		if n == 0 {
			return append(tcpModel(n, req), 0xde, 0xad, 0xbe)
		}
		return tcpModel(n, req)
	})
	c := openTCP(t, "tcp://"+s.ln.Addr().String(), time.Second)
	_, err := c.Read(context.Background(), 1, 3, 0, 1)
	if !errors.Is(err, ErrUnexpectedReply) || !strings.Contains(err.Error(), "more bytes follow") {
		t.Fatalf("got %v, want ErrUnexpectedReply about the trailing bytes", err)
	}
	got, err := c.Read(context.Background(), 1, 3, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := modelData(3, 0, 1); !bytes.Equal(got, want) {
		t.Fatalf("got % x, want % x", got, want)
	}
}

// replayClient is a Client over RTU (a replayLink) or Modbus TCP (a
// replayConn) that gets reply, in chunks of 3 bytes, to each request.
func replayClient(rtu bool, reply []byte) *Client {
	if rtu {
		return NewRTU(&replayLink{reply: reply, chunk: 3}, 115200, Options{Timeout: time.Second})
	}
	conn := &replayConn{replayLink{reply: reply, chunk: 3}}
	c := newClient(Options{Timeout: time.Second}, false)
	c.tr = newTCPTransport("replay", func(context.Context, time.Time) (net.Conn, error) { return conn, nil }, &c.stats, c.log)
	return c
}

// Replies to a write that do not echo it as the specification says are
// refused, and leave the write unsettled; only the exact echo and an
// exception settle it.
func TestHostileWriteReplies(t *testing.T) {
	// Slave 1 gets fc 6 addr 0x10 value 12 34, or fc 16 addr 0x10 qty 2.
	type reply struct {
		name string
		fc   byte
		rtu  []byte // RTU frame
		tcp  []byte // Modbus TCP frame
		want error  // nil: accepted; errException: a *gm.ModbusError
	}
	errException := errors.New("exception")
	replies := []reply{
		{"echo", 6, withCRC(1, 6, 0, 0x10, 0x12, 0x34), mbap(1, 1, 6, 0, 0x10, 0x12, 0x34), nil},
		{"echo fc16", 16, withCRC(1, 16, 0, 0x10, 0, 2), mbap(1, 1, 16, 0, 0x10, 0, 2), nil},
		{"exception", 6, withCRC(1, 0x86, 3), mbap(1, 1, 0x86, 3), errException},
		{"wrong value", 6, withCRC(1, 6, 0, 0x10, 0x12, 0x35), mbap(1, 1, 6, 0, 0x10, 0x12, 0x35), ErrUnexpectedReply},
		{"clamped value", 6, withCRC(1, 6, 0, 0x10, 0x00, 0x64), mbap(1, 1, 6, 0, 0x10, 0x00, 0x64), ErrUnexpectedReply},
		{"wrong address", 6, withCRC(1, 6, 0, 0x11, 0x12, 0x34), mbap(1, 1, 6, 0, 0x11, 0x12, 0x34), ErrUnexpectedReply},
		{"wrong quantity", 16, withCRC(1, 16, 0, 0x10, 0, 3), mbap(1, 1, 16, 0, 0x10, 0, 3), ErrUnexpectedReply},
		{"wrong function", 6, withCRC(1, 3, 2, 0x12, 0x34), mbap(1, 1, 3, 2, 0x12, 0x34), ErrUnexpectedReply},
		{"echo of another write", 16, withCRC(1, 6, 0, 0x10, 0, 2), mbap(1, 1, 6, 0, 0x10, 0, 2), ErrUnexpectedReply},
		{"exception to another function", 6, withCRC(1, 0x83, 2), mbap(1, 1, 0x83, 2), ErrUnexpectedReply},
		{"wrong slave", 6, withCRC(2, 6, 0, 0x10, 0x12, 0x34), mbap(1, 2, 6, 0, 0x10, 0x12, 0x34), ErrUnexpectedReply},
		{"short echo", 6, withCRC(1, 6, 0, 0x10, 0x12, 0x34)[:6], mbap(1, 1, 6, 0, 0x10, 0x12), ErrShortFrame},
		{"long echo", 16, withCRC(1, 16, 0, 0x10, 0, 2, 4, 0, 1, 0, 2), mbap(1, 1, 16, 0, 0x10, 0, 2, 4), ErrUnexpectedReply},
		{"silence", 6, nil, nil, ErrTimeout},
	}
	for _, rtu := range []bool{true, false} {
		for _, r := range replies {
			frame := r.tcp
			if rtu {
				frame = r.rtu
			}
			name := fmt.Sprintf("rtu %v, %s", rtu, r.name)
			want := r.want
			switch {
			case !rtu && r.name == "short echo":
				want = ErrUnexpectedReply // MBAP says 5 bytes: a well-framed PDU too short for an echo
			case rtu && r.name == "long echo":
				want = ErrCRC // the frame is cut at the echo's length, where no CRC fits
			}
			data, qty := []byte{0x12, 0x34}, uint16(1)
			if r.fc == 16 {
				data, qty = []byte{0, 1, 0, 2}, 2
			}
			c := replayClient(rtu, frame)
			err := c.Write(context.Background(), 1, r.fc, 0x10, qty, data)
			var me *gm.ModbusError
			switch {
			case want == nil:
				if err != nil {
					t.Errorf("%s: %v, want it accepted", name, err)
				}
			case want == errException:
				if !errors.As(err, &me) || me.ExceptionCode != 3 || unsettled(err) {
					t.Errorf("%s: %v, want a settled exception 3", name, err)
				}
			default:
				if !errors.Is(err, want) || !unsettled(err) {
					t.Errorf("%s: %v (unsettled %v), want an unsettled %v", name, err, unsettled(err), want)
				}
			}
		}
	}
}
