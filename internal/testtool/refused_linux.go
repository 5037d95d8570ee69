package testtool

import (
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback host:port that refuses connections until
// the test ends: a socket of the test's is bound there and does not listen,
// so no other process can listen there meanwhile, as it could on a port
// merely closed.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("testtool: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testtool: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testtool: getsockname: %v", err)
	}
	return LoopbackAddr(sa.(*syscall.SockaddrInet4).Port)
}
