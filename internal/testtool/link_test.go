package testtool

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// A link relays both ways while up; down, it cuts the connection it
// relays and refuses new ones; up again, it relays again.
func TestLink(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = bufio.NewReader(c).WriteTo(c) }()
		}
	}()
	k := NewLink(t, echo.Addr().String())
	roundTrip := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // liveness only
		if _, err := c.Write([]byte("x\n")); err != nil {
			return err
		}
		_, err := bufio.NewReader(c).ReadString('\n')
		return err
	}
	c, err := net.Dial("tcp", k.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatalf("up: %v", err)
	}
	k.Set(false)
	if err := roundTrip(c); err == nil {
		t.Error("down: the relayed connection still answers")
	}
	if d, err := net.Dial("tcp", k.Addr()); err == nil {
		if roundTrip(d) == nil {
			t.Error("down: a new connection was relayed")
		}
		d.Close()
	}
	k.Set(true)
	d, err := net.Dial("tcp", k.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := roundTrip(d); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
