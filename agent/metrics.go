package agent

import (
	"context"
	"log/slog"

	"fieldlink/config"
	"fieldlink/metrics"
)

// ServeMetrics serves /metrics, /healthz and /readyz from src on c's
// metrics listener until the returned function is called; that function
// stops the server and waits for it. A listener that cannot start is
// logged, not fatal: the gateway's job is the data.
func ServeMetrics(c *config.Config, src metrics.Sources, log *slog.Logger) (stop func()) {
	if c.Metrics.Listen == "off" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l := log.With("component", "metrics")
		if err := metrics.Serve(ctx, c.Metrics.Listen, metrics.Handler(src), c.Metrics.AllowRemote, l); err != nil {
			l.Error("metrics and health endpoints not available", "listen", c.Metrics.Listen, "err", err)
		}
	}()
	return func() { cancel(); <-done }
}
