package main

import (
	"context"
	"errors"
	"os"
	"time"

	"fieldlink/buffer"
	"fieldlink/config"
	"fieldlink/selector"
)

// irlbModelKey names the irlb selector's LSTM weights in the buffer file's
// aux bucket, so that a restart predicts with what was learnt before.
const irlbModelKey = "irlb.model"

// legacyIRLBModelFile is where earlier versions kept the model, beside the
// buffer; it is read once if the buffer holds none, and removed once the
// model is saved in the buffer.
func legacyIRLBModelFile(c *config.Config) string { return c.Buffer.Path + ".irlb.model" }

// trainIRLB restores the irlb strategy's saved model, then retrains it on
// the connection history every interval (off the pick path) and saves it
// in the buffer, until ctx ends.
func (n *north) trainIRLB(ctx context.Context, c *config.Config, q *buffer.Buffer, s *selector.IRLB, interval time.Duration) {
	data, err := q.Aux(irlbModelKey)
	from := "buffer"
	if err == nil && data == nil {
		data, err = os.ReadFile(legacyIRLBModelFile(c))
		from = legacyIRLBModelFile(c)
	}
	if err == nil {
		var m selector.LSTM
		if err := m.UnmarshalBinary(data); err == nil && s.SetModel(&m) == nil {
			n.log.Info("irlb: model restored", "from", from)
		} else {
			n.log.Warn("irlb: saved model unusable; learning afresh", "from", from, "err", err)
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
			err = q.PutAux(irlbModelKey, data)
		}
		if err != nil {
			n.log.Warn("irlb: model not saved", "err", err)
			continue
		}
		_ = os.Remove(legacyIRLBModelFile(c))
	}
}
