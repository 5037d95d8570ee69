package testtool

import (
	"context"
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
