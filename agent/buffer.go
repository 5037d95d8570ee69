package agent

import (
	"fmt"
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
