//go:build !linux

package testtool

import (
	"net"
	"testing"
)

// RefusedAddr returns a loopback host:port that refused connections a
// moment ago (a port closed: elsewhere than Linux another process may
// listen there meanwhile).
func RefusedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
