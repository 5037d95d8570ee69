package modbus

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.bug.st/serial"
)

// serialPollSlice bounds one blocking read on a serial port, so that a
// deadline moved from another goroutine (a canceled ctx) is noticed within
// this long.
const serialPollSlice = 20 * time.Millisecond

// sysfsRoot is where Linux exposes USB serial adapters' settings.
const sysfsRoot = "/sys"

// openSerial opens and configures the serial port of cfg, and lowers the
// USB adapter's latency timer if it can.
func openSerial(cfg config, log *slog.Logger) (Link, error) {
	port, err := serial.Open(cfg.device, cfg.Mode())
	if err != nil {
		return nil, fmt.Errorf("modbus: open serial port %s at %v: %w%s", cfg.device, cfg.Settings, err, openHint(err))
	}
	tuneLatencyTimer(log, sysfsRoot, cfg.device)
	return &serialLink{port: port}, nil
}

// serialLink adapts a go.bug.st/serial port to Link.
//
// The port's Read returns (0, nil) when its timeout passes, which would make
// io.ReadFull spin forever; serialLink turns that into os.ErrDeadlineExceeded
// once the deadline has passed. It reads in slices of at most
// serialPollSlice so that SetReadDeadline from another goroutine takes
// effect on a blocked Read.
type serialLink struct {
	port     serial.Port
	deadline atomic.Int64 // unix nanoseconds; 0 = none
}

func (l *serialLink) Read(p []byte) (int, error) {
	for {
		wait := serialPollSlice
		if d := l.deadline.Load(); d != 0 {
			left := time.Until(time.Unix(0, d))
			if left <= 0 {
				return 0, fmt.Errorf("serial read: %w", os.ErrDeadlineExceeded)
			}
			wait = min(wait, left)
		}
		if err := l.port.SetReadTimeout(wait); err != nil {
			return 0, err
		}
		n, err := l.port.Read(p)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

func (l *serialLink) Write(p []byte) (int, error) { return l.port.Write(p) }

func (l *serialLink) Close() error { return l.port.Close() }

// ResetInputBuffer flushes the kernel's receive buffer: cheaper and more
// thorough than reading stale bytes out.
func (l *serialLink) ResetInputBuffer() error { return l.port.ResetInputBuffer() }

func (l *serialLink) SetReadDeadline(t time.Time) error {
	var d int64
	if !t.IsZero() {
		d = t.UnixNano()
	}
	l.deadline.Store(d)
	return nil
}

// tuneLatencyTimer sets the latency timer of the USB serial adapter behind
// port to 1 ms. FTDI adapters default to 16 ms: they hold received bytes up
// to that long before passing them to the host, which adds up to 16 ms to
// every Modbus exchange, often half its time. Best effort: anything that
// prevents it is logged at debug and otherwise ignored.
func tuneLatencyTimer(log *slog.Logger, sysRoot, port string) {
	dev, err := filepath.EvalSymlinks(port)
	if err != nil {
		log.Debug("modbus: latency timer not checked: cannot resolve port", "port", port, "err", err)
		return
	}
	file := filepath.Join(sysRoot, "bus", "usb-serial", "devices", filepath.Base(dev), "latency_timer")
	b, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			log.Debug("modbus: no latency timer: not a USB serial adapter", "port", port, "device", dev)
		} else {
			log.Debug("modbus: latency timer not readable", "port", port, "file", file, "err", err)
		}
		return
	}
	ms, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		log.Debug("modbus: latency timer unreadable", "port", port, "file", file, "content", string(b))
		return
	}
	if ms <= 1 {
		log.Debug("modbus: latency timer already low", "port", port, "ms", ms)
		return
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString("1\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		log.Debug("modbus: cannot lower latency timer (needs root or a udev rule)", "port", port, "file", file, "ms", ms, "err", err)
		return
	}
	log.Info(fmt.Sprintf("FTDI latency timer %dms -> 1ms", ms), "port", port, "file", file)
}

// openHint says, for the technician, what to do about a port that would
// not open.
func openHint(err error) string {
	var pe *serial.PortError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return " (no such port: is the adapter plugged in? ls /dev/serial/by-id/ lists the ports there are)"
	case errors.As(err, &pe):
		return portHint(pe.Code())
	}
	return ""
}

func portHint(code serial.PortErrorCode) string {
	switch code {
	case serial.PermissionDenied:
		return " (the user running the gateway needs the dialout group: sudo usermod -aG dialout $USER, then log in again; the fieldlink service's user has it)"
	case serial.PortBusy:
		return " (another program holds the port: another gateway, or a terminal program)"
	}
	return ""
}
