package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"fieldlink/config"
	"fieldlink/selector"
	"fieldlink/selector/lstm"
)

// irlbModelKey names the irlb selector's LSTM weights in the buffer file's
// aux bucket, so that a restart predicts with what was learnt before.
const irlbModelKey = "irlb.model"

// irlbInterval is how often the irlb selector retrains, off the pick path.
const irlbInterval = 5 * time.Minute

// legacyIRLBModelFile is where earlier versions kept the model, beside the
// buffer; it is read once if the buffer holds none, and removed once the
// model is saved in the buffer.
func legacyIRLBModelFile(c *config.Config) string { return c.Buffer.Path + ".irlb.model" }

// auxStore is where the irlb model is saved: the buffer's aux state.
type auxStore interface {
	Aux(key string) ([]byte, error)
	PutAux(key string, value []byte) error
}

// restoreIRLB puts back the irlb strategy's saved model, if there is a
// usable one, and says where it came from.
func restoreIRLB(c *config.Config, q auxStore, s selector.Trained, log *slog.Logger) {
	data, err := q.Aux(irlbModelKey)
	from := "buffer"
	if err == nil && data == nil {
		data, err = os.ReadFile(legacyIRLBModelFile(c))
		from = legacyIRLBModelFile(c)
		if errors.Is(err, os.ErrNotExist) {
			return // nothing learnt yet
		}
	}
	if err == nil {
		var m lstm.Model
		if err = m.UnmarshalBinary(data); err == nil {
			err = s.SetModel(&m)
		}
	}
	if err != nil {
		log.Warn("irlb: saved model unusable; learning afresh", "from", from, "err", err)
		return
	}
	log.Info("irlb: model restored", "from", from)
}

// trainIRLB restores the irlb strategy's saved model, then retrains it on
// the connection history every interval (off the pick path) and saves it
// in the buffer, until ctx ends.
func trainIRLB(ctx context.Context, c *config.Config, q auxStore, s selector.Trained, interval time.Duration, log *slog.Logger) {
	restoreIRLB(c, q, s, log)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Train(ctx); err != nil {
			if !errors.Is(err, lstm.ErrNotEnoughData) {
				log.Warn("irlb: training failed", "err", err)
			}
			continue
		}
		data, err := s.Model().MarshalBinary()
		if err == nil {
			err = q.PutAux(irlbModelKey, data)
		}
		if err != nil {
			log.Warn("irlb: model not saved", "err", err)
			continue
		}
		_ = os.Remove(legacyIRLBModelFile(c))
	}
}
