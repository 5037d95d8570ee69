package modbus

import (
	"bytes"
	"context"
	"errors"
	"fieldlink/internal/testtool"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
			if !strings.Contains(err.Error(), "not sent") {
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
