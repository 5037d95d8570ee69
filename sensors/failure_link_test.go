package sensors_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
)

// A network link's failure to connect carries its kind and address from
// the dial's own error, so that the page says it without reading text: a
// real Modbus TCP client dialling an address that refuses, and the
// system's errors for the others.
func TestLinkFailureKinds(t *testing.T) {
	addr := testtool.RefusedAddr(t)
	c, err := modbus.Open("tcp://"+addr, modbus.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Read(context.Background(), 1, 3, 0, 1)
	if f := sensors.FailureOf(fmt.Errorf("device d (slave 1 on bus a): %w", err)); f.Kind != sensors.FailLink || f.Link != sensors.LinkRefused || f.Addr != addr {
		t.Errorf("a refused dial (%v): %+v, want link, refused, %s", err, f, addr)
	}

	dial := func(inner error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 502}, Err: inner}
	}
	for _, c := range []struct {
		err  error
		want sensors.LinkKind
		addr string
	}{
		{dial(&os.SyscallError{Syscall: "connect", Err: syscall.EHOSTUNREACH}), sensors.LinkUnreachable, "10.0.0.5:502"},
		{dial(&os.SyscallError{Syscall: "connect", Err: syscall.ENETUNREACH}), sensors.LinkUnreachable, "10.0.0.5:502"},
		{dial(os.ErrDeadlineExceeded), sensors.LinkNoAnswer, "10.0.0.5:502"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "plc.site", IsNotFound: true}}, sensors.LinkDNS, "plc.site"},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("reset")}, sensors.LinkOther, ""},
	} {
		f := sensors.FailureOf(fmt.Errorf("read holding 0+1: %w", c.err))
		if f.Kind != sensors.FailLink || f.Link != c.want || f.Addr != c.addr {
			t.Errorf("%v: %+v, want link kind %d at %q", c.err, f, c.want, c.addr)
		}
	}
}
