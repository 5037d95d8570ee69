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
		SyncEvery: c.Buffer.SyncEvery,
		MaxBytes:  int64(c.Buffer.MaxBytes),
		MaxAge:    c.Buffer.MaxAge,
		Encoding:  Encoding(c),
		Logger:    log.With("component", "buffer"),
	}
	if c.Buffer.Durability == "interval" {
		opt.Durability = buffer.Interval
	}
	if c.Buffer.WhenFull == "reject_new" {
		opt.WhenFull = buffer.RejectNew
	}
	if c.Buffer.Order == "newest_first" {
		opt.Order = buffer.NewestFirst
	}
	b, err := buffer.Open(c.Buffer.Path, opt)
	if err != nil {
		return nil, fmt.Errorf("buffer %s: %w", c.Buffer.Path, err)
	}
	return b, nil
}
