package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"time"

	"fieldlink/agent"
	"fieldlink/buffer"
	"fieldlink/config"
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
	var v downlink.Value
	switch *value {
	case "true", "on":
		v = downlink.Bool(true)
	case "false", "off":
		v = downlink.Bool(false)
	default:
		n, err := strconv.ParseFloat(*value, 64)
		if err != nil {
			return fmt.Errorf("-value %q: give a number, or true or false for a coil", *value)
		}
		v = downlink.Number(n)
	}
	if *actor == "" {
		*actor = "local:" + localUser()
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	now := time.Now()
	cmd := downlink.Command{
		ID: "local-" + now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(id[:]), Device: *dev, Point: *point,
		Value: v, IssuedAt: downlink.NewTimestamp(now), Actor: *actor,
	}
	res, err := agent.SendCommand(ctx, agent.ControlPath(c), cmd)
	if errors.Is(err, agent.ErrNoDaemon) {
		res, err = writeDirect(ctx, c, cmd, stderr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", res.JSON())
	if res.Status != downlink.StatusDone {
		return errSilent
	}
	return nil
}

// writeDirect runs cmd on the bus itself, no daemon running: the command's
// id and audit go into the buffer file, and its record waits there for the
// daemon to deliver.
func writeDirect(ctx context.Context, c *config.Config, cmd downlink.Command, stderr io.Writer) (downlink.Result, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q, err := agent.OpenBuffer(c, log)
	if errors.Is(err, buffer.ErrLocked) {
		return downlink.Result{}, fmt.Errorf("%w: a daemon holds the buffer but its control socket %s does not answer (see its log)", err, agent.ControlPath(c))
	}
	if err != nil {
		return downlink.Result{}, err
	}
	defer q.Close()
	site, err := agent.OpenSite(c, log)
	if err != nil {
		return downlink.Result{}, err
	}
	defer site.Close()
	return agent.WriteOnce(ctx, c, q, site, cmd, log)
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
