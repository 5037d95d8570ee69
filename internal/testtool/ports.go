package testtool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A server in the test's own process listens on 127.0.0.1:0 and the test
// reads the port back: nothing can take it in between. A server in another
// process that must be told its port in advance (mosquitto, nats-server,
// influxd, pymodbus, the gateway's metrics) cannot be given a port that is
// sure to stay free until it binds, so it is started here, by
// [OnFreshPorts], which tries other ports when the server says its port was
// taken, and restarted by [OnSamePorts], which waits for its port to be
// free again instead of moving.

// ErrPortInUse is what a start function of [OnFreshPorts] or [OnSamePorts]
// wraps when the server could not bind a port because another process had
// it (see [PortInUse]).
var ErrPortInUse = errors.New("testtool: port in use")

// PortInUse reports whether a server's log or error says that a port it was
// told was taken: "address already in use", as Go, Python and C servers
// put EADDRINUSE, Erlang's eaddrinuse (a RabbitMQ listener), RabbitMQ's
// check of its distribution port, and an epmd that found another on its
// port.
func PortInUse(log string) bool {
	l := strings.ToLower(log)
	for _, s := range []string{"address already in use", "eaddrinuse", "dist_port_already_used", "already a epmd running"} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// freshTries is how many sets of ports OnFreshPorts tries.
const freshTries = 10

// sameWait is how long OnSamePorts retries a port of the test's that is
// still busy: a killed server's port is ours, taken only for a moment (by
// the dying process, or by a connection's ephemeral port) or by a rare
// other test's server.
const sameWait = 30 * time.Second

// OnFreshPorts calls start with n distinct loopback ports that nothing
// listened on when chosen, and returns them once start returns nil. When
// start returns an error wrapping [ErrPortInUse], it is called again with
// n other ports; any other error, or ten ports taken in a row, fails the
// test. The ports are never handed out again in this process, so that a
// server killed and started again ([OnSamePorts]) finds its port free.
func OnFreshPorts(t testing.TB, n int, start func(ports []int) error) []int {
	t.Helper()
	ports, err := FreshPorts(n, func(ports []int) error {
		err := start(ports)
		if errors.Is(err, ErrPortInUse) {
			t.Logf("ports %v taken before the server bound them; trying others", ports)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// FreshPorts is OnFreshPorts for a program that is not a test: it returns
// the error that OnFreshPorts fails the test with.
func FreshPorts(n int, start func(ports []int) error) ([]int, error) {
	var err error
	for range freshTries {
		ports, perr := pickPorts(n)
		if perr != nil {
			return nil, perr
		}
		if err = start(ports); err == nil {
			return ports, nil
		}
		if !errors.Is(err, ErrPortInUse) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("testtool: no free ports after %d tries: %w", freshTries, err)
}

// OnSamePorts calls start with ports again (a server of the test's,
// killed, that must come back where its peers expect it); while start
// returns an error wrapping [ErrPortInUse] it is retried on the same ports
// for up to 30 s. Any other error fails the test.
func OnSamePorts(t testing.TB, ports []int, start func(ports []int) error) {
	t.Helper()
	if err := SamePorts(ports, start); err != nil {
		t.Fatal(err)
	}
}

// SamePorts is OnSamePorts for a caller that cannot end the test (a
// goroutine restarting servers at once): it returns the error that
// OnSamePorts fails the test with.
func SamePorts(ports []int, start func(ports []int) error) error {
	deadline := time.Now().Add(sameWait)
	for {
		err := start(ports)
		if err == nil || !errors.Is(err, ErrPortInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// OnFreshPort is OnFreshPorts for a server of one port.
func OnFreshPort(t testing.TB, start func(port int) error) int {
	t.Helper()
	return OnFreshPorts(t, 1, func(p []int) error { return start(p[0]) })[0]
}

// FreshPort is FreshPorts for a server of one port.
func FreshPort(start func(port int) error) (int, error) {
	p, err := FreshPorts(1, func(p []int) error { return start(p[0]) })
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// OnSamePort is OnSamePorts for a server of one port.
func OnSamePort(t testing.TB, port int, start func(port int) error) {
	t.Helper()
	OnSamePorts(t, []int{port}, func(p []int) error { return start(p[0]) })
}

// LoopbackAddr is 127.0.0.1:port.
func LoopbackAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

var (
	portsMu sync.Mutex
	given   = map[int]bool{} // ports handed out in this process
	// pickHook, when set by a test of this package, chooses the next port
	// instead of the random choice (to hand out a port the test holds).
	pickHook func() (int, bool)
)

// pickPorts chooses n ports, each free to bind a moment ago and never
// handed out before in this process. They are below the kernel's ephemeral
// range, where the kernel puts neither a port-0 listener nor the local end
// of an outgoing connection: only another test's chosen port can collide.
func pickPorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := 10000, ephemeralLow()
	if hi-lo < 1000 { // a machine whose ephemeral range starts low: take any
		lo, hi = 1024, 65536
	}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("testtool: no bindable port in [%d, %d) after %d tries", lo, hi, tries)
		}
		p := lo + rand.IntN(hi-lo)
		if pickHook != nil {
			if hp, ok := pickHook(); ok {
				ports = append(ports, hp)
				given[hp] = true
				continue
			}
		}
		if given[p] || !bindable(p) {
			continue
		}
		given[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// bindable reports whether a listener could bind 127.0.0.1:port just now.
func bindable(port int) bool {
	ln, err := net.Listen("tcp", LoopbackAddr(port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 1024 {
		return 32768
	}
	return n
}
