package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"time"

	"fieldlink/agent"
	"fieldlink/downlink"
)

// cmdWrite writes one point for commissioning, with every check and the
// audit of a command from the platform: through the running daemon's
// control socket, so that the write takes its turn on the bus, or straight
// to the bus when no daemon runs.
func cmdWrite(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := flags("write", stderr)
	file := f.String("c", "", "site file")
	dev := f.String("device", "", "device name, as in the site file")
	point := f.String("point", "", "point name, as in the device's profile; it must be listed under the device's writable")
	value := f.String("value", "", "value in engineering units (true or false for a coil)")
	actor := f.String("actor", "", "who writes, for the audit log; default local:USER")
	if err := parse(f, args); err != nil {
		return err
	}
	if *dev == "" || *point == "" || *value == "" {
		fmt.Fprintln(stderr, "gateway write: give -device, -point and -value")
		return errUsage
	}
	c, err := loadConfig(*file, stderr)
	if err != nil {
		printErr(stderr, err)
		return errSilent
	}
	if *actor == "" {
		*actor = "local:" + localUser()
	}
	cmd, err := downlink.LocalCommand(*dev, *point, *value, *actor, time.Now())
	if err != nil {
		return fmt.Errorf("-%w", err)
	}
	res, err := agent.Write(ctx, c, cmd, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", res.JSON())
	if res.Status != downlink.StatusDone {
		return errSilent
	}
	return nil
}

// localUser names the person at the console, through sudo if need be.
func localUser() string {
	if u := os.Getenv("SUDO_USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}
