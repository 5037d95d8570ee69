package uplink

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// Redaction: what an upstream's configuration or answer holds that must never
// reach a log line or an error (passwords, tokens in a URL's userinfo or
// query, credentials a server echoes back).

// String describes c without its password, so that printing a config
// cannot leak it.
func (c MQTTConfig) String() string {
	return fmt.Sprintf("MQTTConfig{URL:%s ClientID:%s Topic:%s Username:%s Password:%s}",
		c.URL, c.ClientID, c.Topic, c.Username, mqttRedact(c.Password))
}

// GoString is String, for %#v.
func (c MQTTConfig) GoString() string { return c.String() }

// LogValue is String, for slog.
func (c MQTTConfig) LogValue() slog.Value { return slog.StringValue(c.String()) }

func mqttRedact(s string) string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// httpRedactURL renders u as scheme://host/path: without userinfo, and with
// "?..." in place of a query (tokens often travel there) and no fragment.
func httpRedactURL(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath, Opaque: u.Opaque}
	s := r.String()
	if u.RawQuery != "" || u.ForceQuery {
		s += "?..."
	}
	return s
}

// httpUnwrapURLError drops the *url.Error wrapper, whose message repeats the
// URL with its query.
func httpUnwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// httpExcerpt makes a bounded, valid UTF-8, secret-free string of a body.
func httpExcerpt(b []byte, secrets []string) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "xxxxx")
		}
	}
	return s
}
