package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"fieldlink/config"
)

func cmdInit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	f := flags("init", stderr)
	kind := f.String("kind", "farm", "farm or mine")
	out := f.String("o", "site.yaml", `write to this file ("-": standard output)`)
	force := f.Bool("force", false, "overwrite the file without asking")
	var v config.StarterVars
	f.StringVar(&v.Port, "port", "/dev/ttyUSB0", "the RS-485 port of the first serial line")
	f.StringVar(&v.Broker, "broker", "mqtt://127.0.0.1:1883", "the platform's MQTT broker")
	f.StringVar(&v.Buffer, "buffer", config.DefaultBufferPath, "the buffer file (relative: beside the site file)")
	f.StringVar(&v.Listen, "listen", "", `the status page and /metrics listener ("off": none; default 127.0.0.1:9273)`)
	if err := parse(f, args); err != nil {
		return err
	}
	b, err := config.Starter(*kind, v)
	if err != nil {
		return err
	}
	if *out == "-" {
		_, err = stdout.Write(b)
		return err
	}
	if _, err := os.Stat(*out); err == nil && !*force {
		if !ask(stdin, stderr, fmt.Sprintf("%s exists: overwrite it? [y/N] ", *out)) {
			return fmt.Errorf("%s exists: not overwritten (give -o another name, or -force)", *out)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s: a %s with its usual sensors, ready to run. Set the slave ids and the port to yours, then:\n  gateway check %s\n  gateway poll %s\n  gateway run %s\n", *out, *kind, *out, *out, *out)
	return nil
}

// ask asks a yes-or-no question on a terminal; anything but a yes, and
// no terminal to ask on, is a no.
func ask(in io.Reader, w io.Writer, question string) bool {
	if f, ok := in.(*os.File); ok {
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return false
		}
	}
	fmt.Fprint(w, question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}
