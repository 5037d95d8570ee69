package agent

import (
	"context"
	"log/slog"
	"time"

	"fieldlink/config"
	"fieldlink/selector"
)

// irlbInterval is how often the irlb selector retrains, off the pick path.
const irlbInterval = 5 * time.Minute

// legacyIRLBModelFile is where earlier versions kept the irlb model, beside
// the buffer; it is read once if the buffer holds none, and removed once
// the model is saved in the buffer.
func legacyIRLBModelFile(c *config.Config) string { return c.Buffer.Path + ".irlb.model" }

// trainIRLB keeps the irlb strategy trained and its model in the site's
// buffer (selector.KeepTrained), until ctx ends.
func trainIRLB(ctx context.Context, c *config.Config, q selector.ModelStore, s selector.Trained, interval time.Duration, log *slog.Logger) {
	selector.KeepTrained(ctx, s, q, legacyIRLBModelFile(c), interval, log)
}
