// Package sdnotify tells systemd how the gateway is doing, over the
// notification socket of a Type=notify service (see sd_notify(3)), in pure
// Go: no cgo, no libsystemd.
//
// [Ready] says start-up is done (systemd holds "systemctl start" and any
// units ordered after the gateway until then), [Stopping] says a clean
// shutdown has begun, and [Watchdog] feeds the service watchdog
// (WatchdogSec= in the unit). [RunWatchdog] feeds it on a schedule for as
// long as a health function says the gateway is doing its job, so that a
// wedged gateway stops feeding it and systemd kills and restarts it.
//
// Outside systemd, where $NOTIFY_SOCKET is unset, every function is a no-op
// and returns nil: the gateway runs the same from a shell.
//
// The environment is read at every call, and nothing is cached or unset, so
// the functions are safe for concurrent use.
package sdnotify
