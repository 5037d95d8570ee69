package selector_test

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/selector"
	"fieldlink/selector/lstm"
)

// TestIRLBModelKeptInBuffer checks that the irlb model saved in the buffer
// file's aux bucket is what KeepTrained restores at start-up.
func TestIRLBModelKeptInBuffer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buf.db")
	q, err := buffer.Open(path, buffer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var samples []lstm.Sample
	for i := range 120 {
		samples = append(samples, lstm.Sample{T: float64(i), Q: 10 + 5*math.Sin(float64(i)/4)})
	}
	m := lstm.New(lstm.Options{Hidden: 4, Window: 6, Epochs: 5})
	if _, err := m.Fit(context.Background(), samples); err != nil {
		t.Fatal(err)
	}
	data, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.PutAux(selector.ModelKey, data); err != nil {
		t.Fatal(err)
	}

	s := newIRLB(t)
	if s.Model() != nil {
		t.Fatal("a new irlb strategy already has a model")
	}
	var log bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		selector.KeepTrained(ctx, s, q, path+".irlb.model", time.Hour, slog.New(slog.NewTextHandler(&log, nil)))
	}()
	testtool.Eventually(10*time.Second, 5*time.Millisecond, func() bool { return s.Model() != nil }) // the check below says what is wrong
	cancel()
	<-done
	got, err := s.Model().MarshalBinary()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("restored model differs from the saved one (err %v)\nlog: %s", err, log.String())
	}
	if !bytes.Contains(log.Bytes(), []byte("from=buffer")) {
		t.Errorf("log does not say the model came from the buffer: %s", log.String())
	}
}

// A saved model that cannot be used is logged with the reason, never with
// a nil error.
func TestIRLBUnusableModelSaysWhy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buf.db")
	q, err := buffer.Open(path, buffer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.PutAux(selector.ModelKey, []byte("not a model")); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	s := newIRLB(t)
	selector.RestoreModel(s, q, path+".irlb.model", slog.New(slog.NewTextHandler(&log, nil)))
	if s.Model() != nil {
		t.Fatal("an unusable model was restored")
	}
	if !strings.Contains(log.String(), "unusable") || !strings.Contains(log.String(), "bad model") {
		t.Errorf("log does not say why the model is unusable: %s", log.String())
	}
}

// newIRLB returns a fresh irlb strategy, as the site file's selector: irlb
// makes it.
func newIRLB(t *testing.T) selector.Trained {
	t.Helper()
	s, err := selector.New("irlb", selector.StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, ok := s.(selector.Trained)
	if !ok {
		t.Fatalf("irlb (%T) is not a selector.Trained", s)
	}
	return tr
}
