package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Under systemd, with stderr the journal's stream, auto logs journal
// entries with a field per attribute; FIELDLINK_LOG_FORMAT overrides auto;
// journal without a reachable socket falls back to JSON lines.
func TestLogFormatJournal(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "journal")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	old := journalSocket
	journalSocket = sock
	defer func() { journalSocket = old }()

	stream, err := os.CreateTemp(t.TempDir(), "stream")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	fi, _ := stream.Stat()
	st := fi.Sys().(*syscall.Stat_t)
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	t.Setenv("INVOCATION_ID", "abc")
	t.Setenv("FIELDLINK_LOG_FORMAT", "")

	log, err := newLoggerFormat(stream, "info", "auto")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("gateway running", "devices", 2)
	buf := make([]byte, 4096)
	_ = l.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := l.Read(buf)
	if err != nil {
		t.Fatalf("no journal entry: %v", err)
	}
	if e := string(buf[:n]); !strings.Contains(e, "MESSAGE=gateway running\n") || !strings.Contains(e, "DEVICES=2\n") {
		t.Errorf("journal entry %q", e)
	}

	// Not the journal's stream: JSON under systemd, as before.
	var b bytes.Buffer
	log, _ = newLoggerFormat(&b, "info", "auto")
	log.Info("x")
	if !strings.HasPrefix(b.String(), "{") {
		t.Errorf("under systemd, not on the journal's stream: %q", b.String())
	}

	t.Setenv("FIELDLINK_LOG_FORMAT", "text")
	b.Reset()
	log, _ = newLoggerFormat(&b, "info", "auto")
	log.Info("x")
	if !strings.HasPrefix(b.String(), "time=") {
		t.Errorf("FIELDLINK_LOG_FORMAT=text: %q", b.String())
	}
	t.Setenv("FIELDLINK_LOG_FORMAT", "xml")
	if _, err := newLoggerFormat(&b, "info", "auto"); err == nil || !strings.Contains(err.Error(), "FIELDLINK_LOG_FORMAT") {
		t.Errorf("FIELDLINK_LOG_FORMAT=xml: %v", err)
	}

	journalSocket = filepath.Join(t.TempDir(), "none")
	b.Reset()
	log, err = newLoggerFormat(&b, "info", "journal")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("no journal")
	if !strings.Contains(b.String(), `"msg":"no journal"`) {
		t.Errorf("journal without a socket: %q", b.String())
	}
}

func TestLogFormats(t *testing.T) {
	var b bytes.Buffer
	l, err := newLoggerFormat(&b, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("device not answering", "device", "ch4-1")
	if !json.Valid(bytes.TrimSpace(b.Bytes())) || !strings.Contains(b.String(), `"device":"ch4-1"`) {
		t.Fatalf("json log: %s", b.String())
	}
	t.Setenv("INVOCATION_ID", "abc")
	b.Reset()
	l, _ = newLogger(&b, "info")
	l.Info("x")
	if !strings.HasPrefix(b.String(), "{") {
		t.Fatalf("under systemd the log should be JSON: %s", b.String())
	}
	if _, err := newLoggerFormat(&b, "info", "xml"); err == nil {
		t.Fatal("xml accepted")
	}
}
