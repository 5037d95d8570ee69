package modbus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fieldlink/internal/testtool"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"
)

// tcpServer is an in-test Modbus TCP (or RTU-over-TCP) slave on
// 127.0.0.1:0.
type tcpServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	tids  []uint16 // transaction ids seen, in order (Modbus TCP only)
	wg    sync.WaitGroup
}

// mbapReply frames a reply PDU with an MBAP header.
func mbapReply(tid uint16, unit byte, pdu []byte) []byte {
	b := make([]byte, 7, 7+len(pdu))
	binary.BigEndian.PutUint16(b[0:], tid)
	binary.BigEndian.PutUint16(b[4:], uint16(len(pdu)+1))
	b[6] = unit
	return append(b, pdu...)
}

// startTCPServer serves Modbus TCP: h gets the whole request (MBAP and PDU)
// and returns raw bytes to send back. The n passed to h counts requests
// over all connections. rtu switches to RTU frames served by serveRTU.
func startTCPServer(t *testing.T, rtu bool, h handler) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpServer{ln: ln}
	var count sync.Mutex
	n := 0
	next := func() int { count.Lock(); defer count.Unlock(); n++; return n - 1 }
	s.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, conn)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer conn.Close()
				if rtu {
					serveRTU(t, conn, func(_ int, req []byte) []byte { return h(next(), req) })
					return
				}
				req := make([]byte, 12)
				for {
					if _, err := io.ReadFull(conn, req); err != nil {
						return
					}
					if binary.BigEndian.Uint16(req[2:]) != 0 || binary.BigEndian.Uint16(req[4:]) != 6 {
						t.Errorf("server: bad MBAP header % x", req[:7])
					}
					s.mu.Lock()
					s.tids = append(s.tids, binary.BigEndian.Uint16(req))
					s.mu.Unlock()
					if reply := h(next(), append([]byte(nil), req...)); len(reply) > 0 {
						if _, err := conn.Write(reply); err != nil {
							return
						}
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *tcpServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// tcpModel answers a Modbus TCP request from the register model.
func tcpModel(_ int, req []byte) []byte {
	return mbapReply(binary.BigEndian.Uint16(req), req[6], modelPDU(req[7:12]))
}

func openTCP(t *testing.T, url string, timeout time.Duration) *Client {
	t.Helper()
	c, err := Open(url, Options{Timeout: timeout, Logger: testtool.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestTCPRead(t *testing.T) {
	s := startTCPServer(t, false, tcpModel)
	c := openTCP(t, "tcp://"+s.ln.Addr().String(), time.Second)
	tests := []struct {
		unit, fc  byte
		addr, qty uint16
	}{
		{1, 3, 0, 1}, {1, 3, 100, 125}, {0, 4, 7, 3}, {255, 1, 5, 19}, {2, 1, 0, 2000}, {1, 2, 3, 16},
	}
	for _, tt := range tests {
		got, err := c.Read(context.Background(), tt.unit, tt.fc, tt.addr, tt.qty)
		if err != nil {
			t.Fatalf("unit %d fc %d: %v", tt.unit, tt.fc, err)
		}
		if want := modelData(tt.fc, tt.addr, tt.qty); !bytes.Equal(got, want) {
			t.Fatalf("unit %d fc %d addr %d qty %d: got % x, want % x", tt.unit, tt.fc, tt.addr, tt.qty, got, want)
		}
	}
	if n := s.accepted(); n != 1 {
		t.Errorf("%d connections for %d good requests, want 1", n, len(tests))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(s.tids); i++ {
		if s.tids[i] != s.tids[i-1]+1 {
			t.Errorf("transaction ids %v do not increase by one", s.tids)
			break
		}
	}
}

// faultTimeout is the tests' request timeout: a silent device costs it,
// and a device that answers must do so within it on a loaded machine and
// under qemu (100 ms timed out a server on the same machine there).
const faultTimeout = time.Second

func TestTCPFaults(t *testing.T) {
	const timeout = faultTimeout
	tid := func(req []byte) uint16 { return binary.BigEndian.Uint16(req) }
	tests := []struct {
		name     string
		fault    func(req []byte) []byte
		wantErr  error
		wantExc  byte
		redialed bool // the client must drop the connection after the fault
	}{
		{name: "exception", fault: func(req []byte) []byte { return mbapReply(tid(req), 1, []byte{0x83, 2}) }, wantExc: 2},
		{name: "silent", fault: func([]byte) []byte { return nil }, wantErr: ErrTimeout, redialed: true},
		{name: "only_stale_tid", fault: func(req []byte) []byte { return mbapReply(tid(req)-1, 1, modelPDU(req[7:12])) },
			wantErr: ErrTimeout, redialed: true},
		{name: "header_then_nothing", fault: func(req []byte) []byte { return mbapReply(tid(req), 1, modelPDU(req[7:12]))[:9] },
			wantErr: ErrShortFrame, redialed: true},
		{name: "wrong_unit", fault: func(req []byte) []byte { return mbapReply(tid(req), 9, modelPDU(req[7:12])) },
			wantErr: ErrUnexpectedReply, redialed: true},
		{name: "protocol_id", fault: func(req []byte) []byte {
			r := tcpModel(0, req)
			r[3] = 1
			return r
		}, wantErr: ErrUnexpectedReply, redialed: true},
		{name: "wrong_function", fault: func(req []byte) []byte {
			q := append([]byte(nil), req...)
			q[7] = 4
			return tcpModel(0, q)
		}, wantErr: ErrUnexpectedReply, redialed: true},
		{name: "wrong_byte_count", fault: func(req []byte) []byte {
			q := append([]byte(nil), req...)
			q[11]++
			return tcpModel(0, q)
		}, wantErr: ErrUnexpectedReply, redialed: true},
		{name: "garbage", fault: func([]byte) []byte { return []byte("HTTP/1.1 400 Bad Request\r\n\r\n") },
			wantErr: ErrUnexpectedReply, redialed: true},
		{name: "closes_connection", fault: func([]byte) []byte { return nil }, wantErr: nil, redialed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s *tcpServer
			s = startTCPServer(t, false, func(n int, req []byte) []byte {
				if n > 0 {
					return tcpModel(n, req)
				}
				if tt.name == "closes_connection" {
					s.mu.Lock()
					s.conns[0].Close()
					s.mu.Unlock()
				}
				return tt.fault(req)
			})
			c := openTCP(t, "tcp://"+s.ln.Addr().String(), timeout)
			_, err := c.Read(context.Background(), 1, 3, 100, 10)
			if err == nil {
				t.Fatal("fault not detected")
			}
			t.Logf("error: %v", err)
			switch {
			case tt.name == "closes_connection":
				if st := c.Stats(); st.IOErrors != 1 {
					t.Errorf("got %v, stats %+v: want an I/O error", err, st)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
			default:
				var me *gm.ModbusError
				if !errors.As(err, &me) || me.ExceptionCode != tt.wantExc {
					t.Fatalf("got %v, want exception %d", err, tt.wantExc)
				}
			}
			if !strings.Contains(err.Error(), "slave 1, read holding registers (fc 3) addr 100 qty 10") {
				t.Errorf("message %q does not name the request", err)
			}
			got, err := c.Read(context.Background(), 1, 3, 200, 2)
			if err != nil {
				t.Fatalf("did not recover: %v", err)
			}
			if want := modelData(3, 200, 2); !bytes.Equal(got, want) {
				t.Fatalf("after the fault got % x, want % x", got, want)
			}
			wantConns := 1
			if tt.redialed {
				wantConns = 2
			}
			if n := s.accepted(); n != wantConns {
				t.Errorf("%d connections, want %d", n, wantConns)
			}
		})
	}
}

// TestTCPStaleTransactionSkipped: a late reply to an earlier request comes
// first and must be skipped, not returned.
func TestTCPStaleTransactionSkipped(t *testing.T) {
	s := startTCPServer(t, false, func(n int, req []byte) []byte {
		tid := binary.BigEndian.Uint16(req)
		late := mbapReply(tid-1, 1, []byte{3, 2, 0xde, 0xad})
		return append(late, tcpModel(n, req)...)
	})
	c := openTCP(t, "tcp://"+s.ln.Addr().String(), time.Second)
	for i := range 3 {
		got, err := c.Read(context.Background(), 1, 3, uint16(i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if want := modelData(3, uint16(i), 1); !bytes.Equal(got, want) {
			t.Fatalf("got % x, want % x", got, want)
		}
	}
	if st := c.Stats(); st.Discarded != 3*11 || st.Responses != 3 {
		t.Errorf("stats %+v: want 33 bytes discarded and 3 responses", st)
	}
}

func TestTCPDialRefused(t *testing.T) {
	addr := testtool.RefusedAddr(t) // nothing listens there
	for _, scheme := range []string{"tcp", "rtuovertcp"} {
		c := openTCP(t, scheme+"://"+addr, time.Second)
		_, err := c.Read(context.Background(), 1, 3, 0, 1)
		if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "dial") {
			t.Errorf("%s: got %v, want a refused dial", scheme, err)
		}
		if st := c.Stats(); st.IOErrors != 1 || st.Requests != 0 {
			t.Errorf("%s: stats %+v", scheme, st)
		}
	}
}

func TestRTUOverTCP(t *testing.T) {
	const timeout = faultTimeout
	var s *tcpServer
	s = startTCPServer(t, true, func(n int, req []byte) []byte {
		switch n {
		case 1: // a silent slave on the bus behind the device server
			return nil
		case 3: // the device server restarts
			s.mu.Lock()
			s.conns[0].Close()
			s.mu.Unlock()
			return nil
		}
		return modelRTU(req)
	})
	c := openTCP(t, "rtuovertcp://"+s.ln.Addr().String()+"?baud=19200", timeout)
	read := func() error {
		got, err := c.Read(context.Background(), 1, 4, 10, 4)
		if err == nil && !bytes.Equal(got, modelData(4, 10, 4)) {
			t.Fatalf("got % x", got)
		}
		return err
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	if err := read(); !errors.Is(err, ErrTimeout) {
		t.Fatalf("silent slave: got %v, want ErrTimeout", err)
	}
	if err := read(); err != nil {
		t.Fatalf("after a timeout: %v", err)
	}
	if n := s.accepted(); n != 1 {
		t.Errorf("a timeout on the bus dropped the connection: %d connections", n)
	}
	if err := read(); err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("closed connection: got %v, want an I/O error", err)
	}
	if err := read(); err != nil {
		t.Fatalf("after redial: %v", err)
	}
	if n := s.accepted(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}
