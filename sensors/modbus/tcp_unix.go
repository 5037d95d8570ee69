//go:build unix

package modbus

import (
	"net"
	"syscall"
)

// pendingInput reports whether conn already holds bytes that nobody asked
// for, without reading them and without waiting. Connections that are not
// sockets (net.Pipe in tests) report false.
func pendingInput(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for readability
	})
	return n > 0
}
