package testtool

import (
	"context"
	"net"
	"testing"
)

// ServeLoopback runs serve on a free 127.0.0.1 port until the test ends,
// then cancels its context and waits for it to return; it returns the
// port's host:port. serve is typically an emulator's ServeTCP or
// ServeRTUOverTCP (a method value), so that testtool needs no import of
// the emulator, whose own tests use testtool. serve must return nil once
// its context ends; any error it returns fails the test.
func ServeLoopback(t testing.TB, serve func(context.Context, net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := serve(ctx, ln); err != nil {
			t.Errorf("serving %s: %v", ln.Addr(), err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}
