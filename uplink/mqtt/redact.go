package mqtt

import (
	"fmt"
	"log/slog"
)

// Redaction: what an upstream's configuration or answer holds that must never
// reach a log line or an error (passwords, tokens in a URL's userinfo or
// query, credentials a server echoes back).

// String describes c without its password, so that printing a config
// cannot leak it.
func (c mqttConfig) String() string {
	return fmt.Sprintf("mqttConfig{URL:%s ClientID:%s Topic:%s Username:%s Password:%s}",
		c.URL, c.ClientID, c.Topic, c.Username, mqttRedact(c.Password))
}

// GoString is String, for %#v.
func (c mqttConfig) GoString() string { return c.String() }

// LogValue is String, for slog.
func (c mqttConfig) LogValue() slog.Value { return slog.StringValue(c.String()) }

func mqttRedact(s string) string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}
