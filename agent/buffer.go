package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"fieldlink/buffer"
	"fieldlink/config"
)

// OpenBuffer opens a site's buffer with its configured policies.
func OpenBuffer(c *config.Config, log *slog.Logger) (*buffer.Buffer, error) {
	opt := buffer.Options{
		SyncEvery:  c.Buffer.SyncEvery,
		MaxBytes:   int64(c.Buffer.MaxBytes),
		MaxAge:     c.Buffer.MaxAge,
		Encoding:   c.Packet.Values,
		Durability: c.Buffer.Durability,
		WhenFull:   c.Buffer.WhenFull,
		Order:      c.Buffer.Order,
		Logger:     log.With("component", "buffer"),
	}
	b, err := buffer.Open(c.Buffer.Path, opt)
	if err != nil {
		return nil, fmt.Errorf("buffer %s: %w", c.Buffer.Path, err)
	}
	return b, nil
}

// OpenStoppedBuffer opens a site's buffer for a command run beside a
// stopped gateway (buffer stats, audit): its warnings go to stderr, and a
// file the running gateway holds is refused with what to do.
func OpenStoppedBuffer(c *config.Config, stderr io.Writer) (*buffer.Buffer, error) {
	q, err := OpenBuffer(c, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if errors.Is(err, buffer.ErrLocked) {
		return nil, fmt.Errorf("%w: is the gateway running? It holds the file: stop it first (systemctl stop fieldlink)", err)
	}
	return q, err
}
