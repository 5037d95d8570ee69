package sdnotify

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Environment variables set by systemd for a Type=notify service.
const (
	// EnvSocket names the notification socket: a path, or an abstract
	// socket name starting with '@'.
	EnvSocket = "NOTIFY_SOCKET"
	// EnvWatchdogUsec is the watchdog timeout in microseconds (WatchdogSec=).
	EnvWatchdogUsec = "WATCHDOG_USEC"
	// EnvWatchdogPID, when set, is the only process meant to feed the watchdog.
	EnvWatchdogPID = "WATCHDOG_PID"
)

// sendTimeout bounds one datagram write: systemd reads its socket promptly,
// and a notification is never worth hanging the gateway for.
const sendTimeout = 2 * time.Second

// Ready tells systemd that start-up has finished (READY=1).
func Ready() error { return Notify("READY=1") }

// Stopping tells systemd that the service is shutting down (STOPPING=1).
func Stopping() error { return Notify("STOPPING=1") }

// Watchdog feeds the service watchdog (WATCHDOG=1).
func Watchdog() error { return Notify("WATCHDOG=1") }

// Notify sends state, one or more newline-separated VAR=value assignments
// as described in sd_notify(3), to $NOTIFY_SOCKET. It returns nil without
// doing anything when $NOTIFY_SOCKET is unset or empty.
func Notify(state string) error {
	name := os.Getenv(EnvSocket)
	if name == "" {
		return nil
	}
	if name[0] != '/' && name[0] != '@' {
		// systemd also knows vsock:CID:PORT sockets, for virtual machines;
		// a gateway never runs under one.
		return fmt.Errorf("sdnotify: %s=%q: not a path or an abstract socket name", EnvSocket, name)
	}
	// The net package maps a leading '@' to Linux's abstract namespace.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	if err := c.SetWriteDeadline(time.Now().Add(sendTimeout)); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: send %q: %w", state, err)
	}
	return nil
}

// WatchdogInterval returns the watchdog timeout systemd expects this
// process to honour, and whether there is one: it is false when
// $WATCHDOG_USEC is unset, zero or malformed, or when $WATCHDOG_PID is set
// and names another process. Feed the watchdog well within the timeout;
// [RunWatchdog] does so at half of it.
func WatchdogInterval() (time.Duration, bool) {
	s := os.Getenv(EnvWatchdogUsec)
	if s == "" {
		return 0, false
	}
	usec, err := strconv.ParseUint(s, 10, 63)
	if err != nil || usec == 0 || usec > uint64(1<<63-1)/uint64(time.Microsecond) {
		return 0, false
	}
	if p := os.Getenv(EnvWatchdogPID); p != "" {
		pid, err := strconv.Atoi(p)
		if err != nil || pid != os.Getpid() {
			return 0, false
		}
	}
	return time.Duration(usec) * time.Microsecond, true
}

// RunWatchdog feeds the watchdog every half [WatchdogInterval] until ctx
// ends, but only at the ticks where healthy (nil means always healthy)
// returns true. A gateway whose healthy stays false for a whole interval is
// killed by systemd (SIGABRT, then SIGKILL) and, with Restart=, started
// again; so healthy must report whether the gateway is making progress, not
// merely that it is alive, and must return quickly without blocking.
//
// RunWatchdog blocks: run it in a goroutine that the caller stops by
// cancelling ctx and then waits for. It returns at once when no watchdog is
// configured or $NOTIFY_SOCKET is unset. A failed send is retried at the
// next tick; one that keeps failing lets the watchdog restart the service,
// which is what should happen to a process that has lost its supervisor's
// socket.
func RunWatchdog(ctx context.Context, healthy func() bool) {
	interval, ok := WatchdogInterval()
	if !ok || os.Getenv(EnvSocket) == "" {
		return
	}
	if healthy == nil {
		healthy = func() bool { return true }
	}
	tick := time.NewTicker(interval / 2)
	defer tick.Stop()
	for ctx.Err() == nil {
		// Feed at once: a service that has just become ready should not
		// wait half an interval for its first feed.
		if healthy() {
			_ = Watchdog()
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}
