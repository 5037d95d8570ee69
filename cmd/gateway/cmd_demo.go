//go:build !field

package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"fieldlink/demo"
)

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("demo", stderr)
	duration := fs.Duration("duration", 20*time.Second, "how long to run; 0 runs until interrupted")
	fs.DurationVar(duration, "for", 20*time.Second, "the same as -duration")
	level := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if _, err := newLogger(io.Discard, *level); err != nil {
		return err
	}
	set, err := loadProfiles("")
	if err != nil {
		return err
	}
	return demo.Run(ctx, demo.Options{
		Duration: *duration, Profiles: set, Debug: *level == "debug",
		Logger: func(w io.Writer) *slog.Logger { l, _ := newLogger(w, *level); return l },
	}, stdout, stderr)
}
