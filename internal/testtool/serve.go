package testtool

import (
	"context"
	"net"
	"testing"
	"time"
)

// Serve runs serve (an emulator's or a fake peer's serve loop) in a
// goroutine until the test ends; then it cancels serve's ctx, waits for it
// to return, and fails the test if it returned an error or did not return.
func Serve(t testing.TB, serve func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(10 * time.Second): // liveness only: a hang, not a slow stop
			t.Error("serve did not return within 10s of cancel")
		}
	})
}

// ServeLoopback runs serve on a free 127.0.0.1 port until the test ends
// (see [Serve]) and returns the port's host:port. serve is typically an
// emulator's ServeTCP or ServeRTUOverTCP (a method value), so that testtool
// needs no import of the emulator, whose own tests use testtool.
func ServeLoopback(t testing.TB, serve func(context.Context, net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, func(ctx context.Context) error { return serve(ctx, ln) })
	return ln.Addr().String()
}
