//go:build !unix

package modbus

import "net"

// pendingInput cannot peek at a socket on this platform; a stray byte is
// caught by the reply checks instead.
func pendingInput(net.Conn) bool { return false }
