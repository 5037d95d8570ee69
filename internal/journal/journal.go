// Package journal is a log/slog handler that writes to systemd's journal in
// its native protocol, so that each attribute of a log line is a field of
// the journal entry (journalctl -o json shows DEVICE=wind-1, and
// journalctl DEVICE=wind-1 finds the lines) rather than text inside
// MESSAGE, as a JSON line on stderr would be.
//
// An entry is one datagram to the journal's socket: MESSAGE, PRIORITY
// (from the level), SYSLOG_IDENTIFIER, then the attributes, their keys in
// upper case with groups joined by "_" (a group "uplink" and a key "err"
// make UPLINK_ERR). An entry the socket refuses (too large, the journal
// gone) is written as a JSON line to the fallback writer instead, which
// under systemd is the journal's stream: a line is never lost.
package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Socket is the journal's native socket.
const Socket = "/run/systemd/journal/socket"

// IsStream reports whether w is the stream systemd connected to the
// journal: $JOURNAL_STREAM holds its device and inode ("dev:ino"), set for
// a service whose stdout or stderr goes to the journal.
func IsStream(w io.Writer) bool {
	f, ok := w.(*os.File)
	env := os.Getenv("JOURNAL_STREAM")
	if !ok || env == "" {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	return env == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// Handler writes log records to the journal.
type Handler struct {
	c        *conn
	opts     slog.HandlerOptions
	fallback slog.Handler // JSON lines, for an entry the socket refuses
	prefix   string       // the open groups, "A_B_"
	attrs    []byte       // fields of WithAttrs, encoded
}

// conn is the socket, shared by a handler and those derived from it.
type conn struct {
	path string
	mu   sync.Mutex
	uc   *net.UnixConn
	id   string
}

// NewHandler connects to the journal's socket at path (Socket) and returns
// a handler whose entries carry identifier as SYSLOG_IDENTIFIER, and that
// writes an entry the socket refuses as a JSON line to fallback.
func NewHandler(path, identifier string, fallback io.Writer, opts *slog.HandlerOptions) (*Handler, error) {
	if opts == nil {
		opts = &slog.HandlerOptions{}
	}
	c := &conn{path: path, id: identifier}
	if err := c.dial(); err != nil {
		return nil, err
	}
	return &Handler{c: c, opts: *opts, fallback: slog.NewJSONHandler(fallback, opts)}, nil
}

func (c *conn) dial() error {
	uc, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: c.path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	c.uc = uc
	return nil
}

// send writes one datagram, dialling again once if the journal went away
// (journald restarted).
func (c *conn) send(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.uc != nil {
		if _, err := c.uc.Write(b); err == nil {
			return nil
		}
		c.uc.Close()
		c.uc = nil
	}
	if err := c.dial(); err != nil {
		return err
	}
	_, err := c.uc.Write(b)
	return err
}

// Enabled reports whether level is at or above the handler's.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	lvl := slog.LevelInfo
	if h.opts.Level != nil {
		lvl = h.opts.Level.Level()
	}
	return level >= lvl
}

// Handle sends r as one journal entry.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	var b bytes.Buffer
	field(&b, "MESSAGE", r.Message)
	field(&b, "PRIORITY", strconv.Itoa(priority(r.Level)))
	if h.c.id != "" {
		field(&b, "SYSLOG_IDENTIFIER", h.c.id)
	}
	b.Write(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	if err := h.c.send(b.Bytes()); err != nil {
		return h.fallback.Handle(ctx, r)
	}
	return nil
}

// WithAttrs returns a handler that adds attrs to every entry.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *h
	var b bytes.Buffer
	b.Write(h.attrs)
	for _, a := range attrs {
		appendAttr(&b, h.prefix, a)
	}
	n.attrs = b.Bytes()
	n.fallback = h.fallback.WithAttrs(attrs)
	return &n
}

// WithGroup returns a handler that puts the attributes that follow in group
// name: their fields are NAME_KEY.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.prefix = h.prefix + fieldName(name) + "_"
	n.fallback = h.fallback.WithGroup(name)
	return &n
}

// priority maps a level to syslog's: debug 7, info 6, warn 4, error 3.
func priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

// reserved are the fields the handler sets itself: an attribute of the
// same name is sent as ATTR_NAME.
var reserved = map[string]bool{"MESSAGE": true, "PRIORITY": true, "SYSLOG_IDENTIFIER": true}

func appendAttr(b *bytes.Buffer, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return // slog's rule: an attribute without a key is left out
	}
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += fieldName(a.Key) + "_"
		}
		for _, g := range v.Group() {
			appendAttr(b, p, g)
		}
		return
	}
	name := prefix + fieldName(a.Key)
	if reserved[name] {
		name = "ATTR_" + name
	}
	field(b, name, valueString(v))
}

func valueString(v slog.Value) string {
	switch v.Kind() {
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return err.Error()
		}
	}
	return v.String()
}

// fieldName turns key into a journal field name: upper-case letters,
// digits and "_", starting with a letter, at most 64 bytes.
func fieldName(key string) string {
	var s strings.Builder
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z':
			s.WriteRune(r - 'a' + 'A')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			s.WriteRune(r)
		default:
			s.WriteByte('_')
		}
	}
	n := s.String()
	if n == "" || n[0] < 'A' || n[0] > 'Z' {
		n = "F" + n
	}
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// field appends name=value in the native protocol: a value with a newline
// goes as the name, a newline, its length (64-bit little endian) and the
// value.
func field(b *bytes.Buffer, name, value string) {
	b.WriteString(name)
	if !strings.Contains(value, "\n") {
		b.WriteByte('=')
		b.WriteString(value)
		b.WriteByte('\n')
		return
	}
	b.WriteByte('\n')
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(value)))
	b.Write(n[:])
	b.WriteString(value)
	b.WriteByte('\n')
}
