package testtool

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// SyncBuffer is a bytes.Buffer that one goroutine may write (a logger, a
// child process) while another reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Logger logs at debug level into the test's own output (t.Log), where
// go test shows it for a failed or -v test only.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// Len is how many bytes were written so far: a mark from which
// [SyncBuffer.Since] reads what a later attempt wrote.
func (s *SyncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// Since is what was written after mark (a [SyncBuffer.Len]).
func (s *SyncBuffer) Since(mark int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mark > s.b.Len() {
		return ""
	}
	return string(s.b.Bytes()[mark:])
}
