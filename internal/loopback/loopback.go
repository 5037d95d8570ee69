// Package loopback says whether a listener stays on the loopback interface
// as far as its address tells before it binds: the one check behind
// metrics.listen, at the site file's validation and at the listener's
// start.
package loopback

import (
	"errors"
	"net/netip"
)

var (
	// ErrEveryInterface is an empty host: ":9273" listens on every
	// interface.
	ErrEveryInterface = errors.New("loopback: listens on every interface")
	// ErrNotLoopback is an IP address off the loopback interface.
	ErrNotLoopback = errors.New("loopback: not a loopback address")
)

// Host checks host, as net.SplitHostPort gives it: an IPv4 or IPv6
// loopback literal (an IPv4-mapped one too) passes, and so does a host
// name, which only the address it binds can tell (check the listener's
// address then).
func Host(host string) error {
	if host == "" {
		return ErrEveryInterface
	}
	if ip, err := netip.ParseAddr(host); err == nil && !ip.Unmap().IsLoopback() {
		return ErrNotLoopback
	}
	return nil
}
