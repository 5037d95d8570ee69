//go:build linux

// Command clockctl plays NTP and fake-hwclock in the power cut tests' VM
// (tests/powercut, clock_vm_test.go): it sets and steps the guest's wall
// clock, which leaves the kernel's NTP state unsynchronised (its maximum
// error at 16 s, STA_UNSYNC set), and marks it synchronised as ntpd and
// chrony do once they have set it: adjtimex with ADJ_STATUS (STA_UNSYNC
// off), ADJ_MAXERROR and ADJ_ESTERROR. It is static and needs nothing of
// the guest but the kernel; busybox's adjtimex applet cannot set the
// status.
//
//	clockctl set UNIX      the clock at UNIX seconds, unsynchronised
//	clockctl step SECONDS  the clock moved by SECONDS (±), unsynchronised
//	clockctl sync [UNIX]   (the clock at UNIX, then) synchronised
//
// Each prints one line, "powercut: clock ..." with the clock and the
// kernel's state after it, which the test waits for on the console.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// adjtimex modes and status bits (linux/timex.h).
const (
	adjMaxError = 0x0004
	adjEstError = 0x0008
	adjStatus   = 0x0010
	staUnsync   = 0x0040
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Printf("powercut: clock error: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: clockctl set UNIX | step SECONDS | sync [UNIX]")
	}
	num := func() (int64, error) {
		if len(args) < 2 {
			return 0, fmt.Errorf("%s: a number is missing", args[0])
		}
		return strconv.ParseInt(args[1], 10, 64)
	}
	switch args[0] {
	case "set":
		n, err := num()
		if err != nil {
			return err
		}
		if err := set(time.Unix(n, 0)); err != nil {
			return err
		}
	case "step":
		n, err := num()
		if err != nil {
			return err
		}
		if err := set(time.Now().Add(time.Duration(n) * time.Second)); err != nil {
			return err
		}
	case "sync":
		if len(args) > 1 {
			n, err := num()
			if err != nil {
				return err
			}
			if err := set(time.Unix(n, 0)); err != nil {
				return err
			}
		}
		var tx syscall.Timex
		if _, err := syscall.Adjtimex(&tx); err != nil {
			return fmt.Errorf("adjtimex (read): %w", err)
		}
		tx.Modes = adjStatus | adjMaxError | adjEstError
		tx.Status &^= staUnsync
		tx.Maxerror, tx.Esterror = 50000, 1000 // µs, as a server a few hops away gives
		if _, err := syscall.Adjtimex(&tx); err != nil {
			return fmt.Errorf("adjtimex: %w", err)
		}
	default:
		return fmt.Errorf("unknown %q: set, step or sync", args[0])
	}
	var tx syscall.Timex
	if _, err := syscall.Adjtimex(&tx); err != nil {
		return fmt.Errorf("adjtimex (read): %w", err)
	}
	fmt.Printf("powercut: clock %s %d maxerror %dus status %#x\n", args[0], time.Now().Unix(), tx.Maxerror, tx.Status)
	return nil
}

// set steps the wall clock to at: the kernel then holds it unsynchronised.
func set(at time.Time) error {
	tv := syscall.NsecToTimeval(at.UnixNano())
	if err := syscall.Settimeofday(&tv); err != nil {
		return fmt.Errorf("settimeofday: %w", err)
	}
	return nil
}
