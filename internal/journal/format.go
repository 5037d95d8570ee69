package journal

import (
	"errors"
	"io"
	"log/slog"
	"os"
)

// FormatEnv names the environment variable that chooses the log format
// when the command line leaves it to "auto".
const FormatEnv = "FIELDLINK_LOG_FORMAT"

// ChooseFormat resolves the log format "auto": what FormatEnv says when it
// is set (fromEnv), journal when w is the journal's stream (a systemd
// service), json under systemd otherwise (INVOCATION_ID is set), text for
// a terminal. Any other format is returned as it is.
func ChooseFormat(w io.Writer, format string) (chosen string, fromEnv bool) {
	if format != "auto" {
		return format, false
	}
	switch env := os.Getenv(FormatEnv); {
	case env != "" && env != "auto":
		return env, true
	case IsStream(w):
		return "journal", false
	case os.Getenv("INVOCATION_ID") != "":
		return "json", false
	}
	return "text", false
}

// ErrFormat is a log format other than text, json or journal.
var ErrFormat = errors.New("journal: unknown log format")

// NewLogger logs to w as text, JSON lines, or journal entries sent to the
// socket at path under identifier (JSON lines on w when that socket
// cannot be reached).
func NewLogger(w io.Writer, format, path, identifier string, opt *slog.HandlerOptions) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opt)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opt)), nil
	case "journal":
		h, err := NewHandler(path, identifier, w, opt)
		if err != nil {
			return slog.New(slog.NewJSONHandler(w, opt)), nil
		}
		return slog.New(h), nil
	}
	return nil, ErrFormat
}
