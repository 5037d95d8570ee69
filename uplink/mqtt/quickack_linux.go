package mqtt

import (
	"net"
	"syscall"
)

// quickAck makes c acknowledge every segment it reads at once
// (TCP_QUICKACK, which Linux clears again by itself, hence after every
// read). A broker that leaves Nagle's algorithm on — mosquitto's default,
// set_tcp_nodelay false — holds each PUBACK until the previous one is
// acknowledged, and Linux delays that acknowledgement up to 40 ms: a
// packet's PUBACK then waited 40 ms, the whole of the poll-to-PUBACK p99
// (BenchmarkPollToAck: 48 ms, 6 ms with this).
func quickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &quickAckConn{TCPConn: tc, raw: raw}
}

type quickAckConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	_ = c.raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
	return n, err
}
