package metrics

import (
	"errors"
	"net/netip"
)

// DefaultListen is metrics.listen's default: loopback only.
const DefaultListen = "127.0.0.1:9273"

// ErrEveryInterface is an empty host: ":9273" listens on every interface.
var ErrEveryInterface = errors.New("metrics: listens on every interface")

// LoopbackHost says whether a listener stays on the loopback interface as
// far as its host, as net.SplitHostPort gives it, tells before it binds:
// the one check behind metrics.listen, at the site file's validation and
// at the listener's start ([Listen]). An IPv4 or IPv6 loopback literal (an
// IPv4-mapped one too) passes, and so does a host name, which only the
// address it binds can tell (check the listener's address then). An empty
// host is [ErrEveryInterface], another IP address [ErrNotLoopback].
func LoopbackHost(host string) error {
	if host == "" {
		return ErrEveryInterface
	}
	if ip, err := netip.ParseAddr(host); err == nil && !ip.Unmap().IsLoopback() {
		return ErrNotLoopback
	}
	return nil
}
