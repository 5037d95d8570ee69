package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"fieldlink/config"
)

func cmdInit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("init", stderr)
	kind := fs.String("kind", "farm", "farm or mine")
	out := fs.String("o", "", "write to this file (refuses to overwrite); default stdout")
	if err := parse(fs, args); err != nil {
		return err
	}
	b, err := config.Starter(*kind)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("%w (not overwriting an existing site file)", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s: edit the ports and slave ids, then run: gateway check -c %s\n", *out, *out)
	return nil
}
