package mqtt

import (
	"io"
	"net"
	"syscall"
	"testing"
)

// After each read the connection is in quick-ack mode again (Linux leaves
// it by itself), so a broker's next PUBACK is never held by Nagle's
// algorithm waiting for our delayed acknowledgement.
func TestQuickAckAfterEveryRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		_, _ = s.Write([]byte("puback-1puback-2"))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	qc := quickAck(c)
	defer qc.Close()
	if _, ok := qc.(*quickAckConn); !ok {
		t.Fatalf("quickAck returned %T, want the wrapper", qc)
	}
	buf := make([]byte, 8)
	for range 2 {
		if _, err := io.ReadFull(qc, buf); err != nil {
			t.Fatal(err)
		}
		raw, _ := c.(*net.TCPConn).SyscallConn()
		var v int
		var gerr error
		_ = raw.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK) })
		if gerr != nil || v != 1 {
			t.Fatalf("TCP_QUICKACK after a read: %d %v, want 1", v, gerr)
		}
	}
}
