package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listen is a journal socket for the test; next returns the fields of the
// next datagram, decoded as journald decodes the native protocol.
func listen(t *testing.T) (path string, next func() map[string]string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "socket")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return path, func() map[string]string {
		t.Helper()
		buf := make([]byte, 1<<16)
		_ = l.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := l.Read(buf)
		if err != nil {
			t.Fatalf("no entry: %v", err)
		}
		f, err := decode(buf[:n])
		if err != nil {
			t.Fatalf("entry %q: %v", buf[:n], err)
		}
		return f
	}
}

// decode parses the native protocol: NAME=value\n, or NAME\n, a 64-bit
// little-endian length, the value and \n.
func decode(b []byte) (map[string]string, error) {
	f := map[string]string{}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return nil, errors.New("field without a newline")
		}
		line := b[:nl]
		if eq := bytes.IndexByte(line, '='); eq >= 0 {
			f[string(line[:eq])] = string(line[eq+1:])
			b = b[nl+1:]
			continue
		}
		rest := b[nl+1:]
		if len(rest) < 8 {
			return nil, errors.New("binary field without a length")
		}
		n := binary.LittleEndian.Uint64(rest)
		if uint64(len(rest)) < 8+n+1 || rest[8+n] != '\n' {
			return nil, errors.New("binary field cut short")
		}
		f[string(line)] = string(rest[8 : 8+n])
		b = rest[8+n+1:]
	}
	return f, nil
}

func TestEntriesCarryFields(t *testing.T) {
	path, next := listen(t)
	var fb bytes.Buffer
	h, err := NewHandler(path, "fieldlink-gateway", &fb, &slog.HandlerOptions{Level: slog.LevelDebug})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(h)

	log.Info("gateway running", "gateway", "gw-01", "devices", 2, "epoch", "95f1ed44")
	want := map[string]string{"MESSAGE": "gateway running", "PRIORITY": "6", "SYSLOG_IDENTIFIER": "fieldlink-gateway",
		"GATEWAY": "gw-01", "DEVICES": "2", "EPOCH": "95f1ed44"}
	if got := next(); !equal(got, want) {
		t.Errorf("entry %v, want %v", got, want)
	}

	// Levels, WithAttrs and groups, errors, durations, a multi-line value,
	// keys that are not field names, and a key the handler sets itself.
	l := log.With("component", "reload").WithGroup("uplink")
	l.Warn("site file refused\nsee below", "err", errors.New("line 3: bad"), "wait", 1500*time.Millisecond,
		slog.Group("tls", "ca-file", "/etc/ca.pem"), "message", "shadowed", "9lives", true, "", "no key")
	want = map[string]string{"MESSAGE": "site file refused\nsee below", "PRIORITY": "4", "SYSLOG_IDENTIFIER": "fieldlink-gateway",
		"COMPONENT": "reload", "UPLINK_ERR": "line 3: bad", "UPLINK_WAIT": "1.5s", "UPLINK_TLS_CA_FILE": "/etc/ca.pem",
		"UPLINK_MESSAGE": "shadowed", "UPLINK_F9LIVES": "true"}
	if got := next(); !equal(got, want) {
		t.Errorf("entry %v, want %v", got, want)
	}
	log.Error("boom", "message", "mine")
	if got := next(); got["PRIORITY"] != "3" || got["ATTR_MESSAGE"] != "mine" || got["MESSAGE"] != "boom" {
		t.Errorf("error entry %v", got)
	}
	log.Debug("tick")
	if got := next(); got["PRIORITY"] != "7" {
		t.Errorf("debug entry %v", got)
	}
	if fb.Len() != 0 {
		t.Errorf("fallback used: %s", fb.String())
	}
}

func TestLevelFilters(t *testing.T) {
	path, _ := listen(t)
	h, err := NewHandler(path, "x", os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	if err != nil {
		t.Fatal(err)
	}
	if h.Enabled(t.Context(), slog.LevelInfo) || !h.Enabled(t.Context(), slog.LevelWarn) {
		t.Error("a warn handler must take warn and error only")
	}
}

// An entry the journal does not take is written as a JSON line to the
// fallback; a journal that comes back is used again.
func TestFallbackAndRedial(t *testing.T) {
	path := filepath.Join(t.TempDir(), "socket")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	var fb bytes.Buffer
	h, err := NewHandler(path, "x", &fb, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(h).With("device", "wind-1")
	l.Close() // the journal is gone
	log.Info("while away", "n", 1)
	var line map[string]any
	if err := json.Unmarshal(fb.Bytes(), &line); err != nil || line["msg"] != "while away" || line["device"] != "wind-1" {
		t.Fatalf("fallback %q: %v", fb.String(), err)
	}

	_ = os.Remove(path)
	l2, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	next := func() map[string]string {
		buf := make([]byte, 4096)
		_ = l2.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := l2.Read(buf)
		if err != nil {
			t.Fatalf("no entry after the journal came back: %v", err)
		}
		f, _ := decode(buf[:n])
		return f
	}
	log.Info("back")
	if got := next(); got["MESSAGE"] != "back" || got["DEVICE"] != "wind-1" {
		t.Errorf("after the journal came back: %v", got)
	}
	if _, err := NewHandler(filepath.Join(t.TempDir(), "none"), "x", &fb, nil); err == nil {
		t.Error("NewHandler with no socket: no error")
	}
}

func TestIsStream(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stream")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := os.CreateTemp(t.TempDir(), "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	t.Setenv("JOURNAL_STREAM", devIno(t, f))
	if !IsStream(f) {
		t.Error("the stream named by JOURNAL_STREAM is not recognised")
	}
	if IsStream(other) || IsStream(&bytes.Buffer{}) {
		t.Error("another file, or a buffer, taken for the journal's stream")
	}
	t.Setenv("JOURNAL_STREAM", "")
	if IsStream(f) {
		t.Error("without JOURNAL_STREAM, a stream")
	}
}

func TestFieldName(t *testing.T) {
	for in, want := range map[string]string{
		"device": "DEVICE", "client_id": "CLIENT_ID", "ca-file": "CA_FILE", "9": "F9", "_x": "F_X", "": "F",
		strings.Repeat("a", 70): strings.Repeat("A", 64), "é": "F_",
	} {
		if got := fieldName(in); got != want {
			t.Errorf("fieldName(%q) = %q, want %q", in, got, want)
		}
	}
}

// devIno is what systemd puts in JOURNAL_STREAM for f.
func devIno(t *testing.T, f *os.File) string {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
