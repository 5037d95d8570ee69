//go:build !field

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"fieldlink/sensors/emulator"
)

// profileList is a repeatable --profile flag: NAME or NAME@SLAVE.
type profileList []string

func (p *profileList) String() string     { return strings.Join(*p, ",") }
func (p *profileList) Set(v string) error { *p = append(*p, v); return nil }

func cmdEmulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("emulate", stderr)
	var profs profileList
	fs.Var(&profs, "profile", "profile to serve, NAME or NAME@SLAVE; repeat for several slaves (ids count up from -slave)")
	first := fs.Int("slave", 1, "slave id of the first profile without @SLAVE")
	listen := fs.String("listen", "", "serve on tcp://127.0.0.1:PORT (Modbus TCP) or rtuovertcp://127.0.0.1:PORT")
	serialPath := fs.String("serial", "", "serve RTU on this serial port (e.g. one end of a socat pty pair)")
	baud := fs.Int("baud", 9600, "baud rate of -serial")
	parity := fs.String("parity", "N", "parity of -serial: N, E or O")
	stopBits := fs.Int("stop-bits", 1, "stop bits of -serial: 1 or 2")
	profilesDir := fs.String("profiles-dir", "", "extra profiles directory")
	drop := fs.Float64("drop", 0, "share of requests left unanswered (0..1)")
	badCRC := fs.Float64("bad-crc", 0, "share of replies with a corrupted CRC (0..1)")
	exception := fs.Float64("exception", 0, "share of requests answered with exception 4 (0..1)")
	turnaround := fs.Duration("turnaround", 0, "slave turnaround before each reply, e.g. 10ms")
	refuseWrites := fs.Bool("refuse-writes", false, "answer every write with exception 3 and store nothing")
	dropWriteReplies := fs.Bool("drop-write-replies", false, "execute writes but send no reply")
	writeReplyDelay := fs.Duration("write-reply-delay", 0, "delay the reply to each write (executed at once), e.g. 2s")
	clampMin := fs.Int("clamp-min", -1, "store holding-register writes no lower than this raw value (0..65535; -1: off)")
	clampMax := fs.Int("clamp-max", -1, "store holding-register writes no higher than this raw value (0..65535; -1: off); the reply echoes what was sent")
	seed := fs.Int64("seed", 1, "seed of values and faults")
	allowRemote := fs.Bool("allow-remote", false, "allow -listen on a non-loopback address")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	if len(profs) == 0 {
		return fmt.Errorf("give at least one --profile NAME (gateway profiles lists them)")
	}
	if (*listen == "") == (*serialPath == "") {
		return fmt.Errorf("give either --listen tcp://127.0.0.1:PORT or --serial PATH")
	}
	set, err := loadProfiles(*profilesDir)
	if err != nil {
		return err
	}
	faults := emulator.Faults{Drop: *drop, BadCRC: *badCRC, Exception: *exception, Turnaround: *turnaround,
		RefuseWrites: *refuseWrites, DropWriteReplies: *dropWriteReplies, WriteReplyDelay: *writeReplyDelay}
	if faults.ClampWrite, err = emulator.Clamp(*clampMin, *clampMax); err != nil {
		return fmt.Errorf("--clamp-min %d --clamp-max %d: %w", *clampMin, *clampMax, err)
	}
	var devs []emulator.Device
	next := *first
	for _, spec := range profs {
		name, slaveText, hasSlave := strings.Cut(spec, "@")
		slave := next
		if hasSlave {
			if slave, err = strconv.Atoi(slaveText); err != nil {
				return fmt.Errorf("--profile %s: slave %q is not a number", spec, slaveText)
			}
		} else {
			next++
		}
		p, ok := set[name]
		if !ok {
			return fmt.Errorf("--profile %s: unknown profile (known: %s)", name, strings.Join(set.Names(), ", "))
		}
		if slave < 1 || slave > 247 {
			return fmt.Errorf("--profile %s: slave id must be 1..247", spec)
		}
		devs = append(devs, emulator.Device{Slave: byte(slave), Profile: p, Faults: faults})
	}
	emu, err := emulator.New(devs, emulator.Options{Seed: *seed, Logger: log})
	if err != nil {
		return err
	}
	for _, d := range devs {
		fmt.Fprintf(stderr, "slave %d: %s (%s %s)\n", d.Slave, d.Profile.Name, d.Profile.Manufacturer, d.Profile.Model)
	}
	if *serialPath != "" {
		par, err := emulator.ParseParity(*parity)
		if err != nil {
			return fmt.Errorf("--parity %w", err)
		}
		port, err := emulator.OpenSerial(*serialPath, *baud, par, 8, *stopBits)
		if err != nil {
			return err
		}
		defer port.Close()
		fmt.Fprintf(stderr, "serving RTU on %s at %d 8%s%d\n", *serialPath, *baud, *parity, *stopBits)
		return emu.ServeRTU(ctx, port, *baud, emulator.CharBits(par, 8, *stopBits))
	}
	u, err := emulator.ListenURL(*listen, *allowRemote)
	if errors.Is(err, emulator.ErrNotLoopback) {
		return fmt.Errorf("%w (pass --allow-remote to serve a network)", err)
	}
	if err != nil {
		return fmt.Errorf("--listen %w", err)
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "serving %s on %s://%s\n", map[string]string{"tcp": "Modbus TCP", "rtuovertcp": "RTU over TCP"}[u.Scheme], u.Scheme, ln.Addr())
	if u.Scheme == "tcp" {
		return emu.ServeTCP(ctx, ln)
	}
	return emu.ServeRTUOverTCP(ctx, ln)
}
