package selector

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"fieldlink/selector/lstm"
)

// ModelKey names a trained strategy's model (irlb's LSTM weights) in the
// store that keeps it across restarts, the buffer file's aux bucket, so
// that a restart predicts with what was learnt before.
const ModelKey = "irlb.model"

// ModelStore is where a trained strategy's model is kept: the buffer's aux
// state.
type ModelStore interface {
	Aux(key string) ([]byte, error)
	PutAux(key string, value []byte) error
}

// RestoreModel puts back s's saved model, if there is a usable one, and
// says where it came from. legacyFile is where earlier versions kept the
// model; it is read when the store holds none.
func RestoreModel(s Trained, store ModelStore, legacyFile string, log *slog.Logger) {
	data, err := store.Aux(ModelKey)
	from := "buffer"
	if err == nil && data == nil {
		data, err = os.ReadFile(legacyFile)
		from = legacyFile
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

// KeepTrained restores s's saved model ([RestoreModel]), then retrains it
// on the connection history every interval (off the pick path) and saves
// it in store, until ctx ends. Once the model is saved in store, the
// legacy file is removed.
func KeepTrained(ctx context.Context, s Trained, store ModelStore, legacyFile string, interval time.Duration, log *slog.Logger) {
	RestoreModel(s, store, legacyFile, log)
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
			err = store.PutAux(ModelKey, data)
		}
		if err != nil {
			log.Warn("irlb: model not saved", "err", err)
			continue
		}
		_ = os.Remove(legacyFile)
	}
}
