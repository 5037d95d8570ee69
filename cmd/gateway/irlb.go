package main

import (
	"context"
	"errors"
	"os"
	"time"

	"fieldlink/config"
	"fieldlink/selector"
)

// irlbModelFile keeps the irlb selector's LSTM weights beside the buffer,
// so that a restart predicts with what was learnt before.
func irlbModelFile(c *config.Config) string { return c.Buffer.Path + ".irlb.model" }

// trainIRLB restores the irlb strategy's saved model, then retrains it on
// the connection history every interval (off the pick path) and saves it,
// until ctx ends.
func (n *north) trainIRLB(ctx context.Context, c *config.Config, s *selector.IRLB, interval time.Duration) {
	if data, err := os.ReadFile(irlbModelFile(c)); err == nil {
		var m selector.LSTM
		if err := m.UnmarshalBinary(data); err == nil && s.SetModel(&m) == nil {
			n.log.Info("irlb: model restored", "file", irlbModelFile(c))
		} else {
			n.log.Warn("irlb: saved model unusable; learning afresh", "err", err)
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Train(ctx); err != nil {
			if !errors.Is(err, selector.ErrLSTMNotEnoughData) {
				n.log.Warn("irlb: training failed", "err", err)
			}
			continue
		}
		data, err := s.Model().MarshalBinary()
		if err == nil {
			err = writeAtomic(irlbModelFile(c), data)
		}
		if err != nil {
			n.log.Warn("irlb: model not saved", "err", err)
		}
	}
}
