package testtool

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"
	"testing"
)

// holdPort listens on a port of the test's until it ends, as another
// process would have taken it.
func holdPort(t *testing.T) (net.Listener, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, ln.Addr().(*net.TCPAddr).Port
}

// handOut has the next port chosen be port, once.
func handOut(t *testing.T, port int) {
	t.Helper()
	portsMu.Lock()
	pickHook = func() (int, bool) { pickHook = nil; return port, true }
	portsMu.Unlock()
	t.Cleanup(func() { portsMu.Lock(); pickHook = nil; portsMu.Unlock() })
}

// listenOn is a start function: a server binding port, whose failure to
// bind a taken port is ErrPortInUse.
func listenOn(t *testing.T, port int) error {
	ln, err := net.Listen("tcp", LoopbackAddr(port))
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w: %v", ErrPortInUse, err)
	}
	if err != nil {
		return err
	}
	t.Cleanup(func() { ln.Close() })
	return nil
}

// A port taken between its choice and the server's bind: the server is
// started again on another port, where it listens.
func TestOnFreshPortsMovesOffATakenPort(t *testing.T) {
	_, taken := holdPort(t)
	handOut(t, taken)
	var tried []int
	got := OnFreshPort(t, func(port int) error {
		tried = append(tried, port)
		return listenOn(t, port)
	})
	if len(tried) != 2 || tried[0] != taken || got == taken || tried[1] != got {
		t.Fatalf("tried %v, got %d; want the taken %d, then another", tried, got, taken)
	}
	c, err := net.Dial("tcp", LoopbackAddr(got))
	if err != nil {
		t.Fatalf("nothing listens on the port handed back: %v", err)
	}
	c.Close()
}

// A start error that is not a taken port fails at once, without retrying.
func TestOnFreshPortsOtherErrorFails(t *testing.T) {
	calls := 0
	ft := &fakeTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		OnFreshPort(ft, func(int) error { calls++; return errors.New("broken config") })
	}()
	if !ft.failed || calls != 1 {
		t.Errorf("failed %v after %d calls; want a failure after 1", ft.failed, calls)
	}
}

// A restart on a port still taken waits for that port rather than moving:
// the server's peers know it there.
func TestOnSamePortsWaitsForItsPort(t *testing.T) {
	holder, port := holdPort(t)
	var tried []int
	OnSamePort(t, port, func(p int) error {
		tried = append(tried, p)
		if len(tried) == 3 {
			holder.Close() // after two tries, the dying server's socket is gone
		}
		return listenOn(t, p)
	})
	if !slices.Equal(tried, []int{port, port, port}) {
		t.Errorf("tried %v; want %d three times", tried, port)
	}
}

// Chosen ports are distinct, never handed out twice, and below the
// kernel's ephemeral range.
func TestPickPorts(t *testing.T) {
	a, err := pickPorts(20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pickPorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range append(a, b...) {
		if seen[p] || p >= ephemeralLow() || p < 1024 {
			t.Errorf("port %d: repeated or out of [1024, %d)", p, ephemeralLow())
		}
		seen[p] = true
	}
}

func TestPortInUse(t *testing.T) {
	for _, l := range []string{
		"1702 [ERR] listen tcp 127.0.0.1:36075: bind: address already in use",
		"1733580000: Error: Address already in use",
		"OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 5020): address already in use",
		"{listen_error,{acceptor,{127,0,0,1},11881},eaddrinuse}",
		"{failed_to_start_child,prelaunch,{dist_port_already_used,25671,\"rabbit1\",\"localhost\"}}",
		"epmd: there is already a epmd running at port 14369 on ipaddr 127.0.0.1",
	} {
		if !PortInUse(l) {
			t.Errorf("PortInUse(%q) = false", l)
		}
	}
	if PortInUse("connection refused") {
		t.Error("PortInUse(connection refused) = true")
	}
}

// RefusedAddr refuses connections, and nobody can listen there.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v; want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Errorf("listen on %s succeeded", addr)
	}
}

// fakeTB records a failure instead of ending the test; Fatal panics to
// stop the caller, as runtime.Goexit would.
type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Fatal(args ...any)                 { f.failed = true; panic("fatal") }
func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = true; panic("fatal") }
func (f *fakeTB) Helper()                           {}

// mosquitto told a port the test holds says so and exits; NewMosquitto
// starts it on another port, and after Kill, Start brings it back on that
// same port.
func TestMosquittoMovesOffATakenPort(t *testing.T) {
	bin := FindMosquitto(t)
	_, taken := holdPort(t)
	handOut(t, taken)
	m := NewMosquitto(t, bin)
	if m.Addr() == LoopbackAddr(taken) {
		t.Fatalf("mosquitto on the taken %s", m.Addr())
	}
	if !PortInUse(m.Log()) {
		t.Errorf("mosquitto's log does not show the taken port:\n%s", m.Log())
	}
	addr := m.Addr()
	m.Kill()
	m.Start()
	if m.Addr() != addr {
		t.Fatalf("restarted on %s, was on %s", m.Addr(), addr)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("restarted mosquitto: %v", err)
	}
	c.Close()
}

func TestMetricsAddr(t *testing.T) {
	for _, log := range []string{
		"time=2026-12-07T16:00:00Z level=INFO msg=\"metrics listening\" component=metrics addr=127.0.0.1:40123\n",
		`{"time":"2026-12-07T16:00:00Z","level":"INFO","msg":"metrics listening","component":"metrics","addr":"127.0.0.1:40123"}` + "\n",
	} {
		if got := MetricsAddr(t, func() string { return log }); got != "127.0.0.1:40123" {
			t.Errorf("MetricsAddr(%q) = %q", log, got)
		}
	}
}
