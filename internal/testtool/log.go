package testtool

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
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

// metricsListening finds the address of the gateway's "metrics listening"
// log line, in text (addr=host:port) or JSON ("addr":"host:port").
var metricsListening = regexp.MustCompile(`metrics listening.*?\baddr"?[=:]"?([^\s",]+)`)

// MetricsAddr waits up to 30 s for a gateway's log (read by log, e.g. a
// SyncBuffer's String), at level info or below, to say where its metrics
// listener bound: for a gateway told to listen on 127.0.0.1:0, so that no
// port is chosen before the gateway binds it.
func MetricsAddr(t testing.TB, log func() string) string {
	t.Helper()
	addr, err := MetricsListening(log, nil)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// MetricsListening waits up to 30 s for a gateway's log, at level info or
// below, to say where its metrics listener bound, and returns that address;
// when the log says the port it was told was taken, it returns an error
// wrapping [ErrPortInUse] (for [OnFreshPort]). A close of exited (nil:
// never) ends the wait with an error.
func MetricsListening(log func() string, exited <-chan struct{}) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := log()
		if m := metricsListening.FindStringSubmatch(l); m != nil {
			return m[1], nil
		}
		if PortInUse(l) {
			return "", fmt.Errorf("%w: the gateway's metrics: %s", ErrPortInUse, l)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("testtool: the gateway's log did not say where its metrics listen within 30s:\n%s", l)
		}
		select {
		case <-exited:
			return "", fmt.Errorf("testtool: the gateway exited before its metrics listened:\n%s", log())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
