package http

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// ParseHeaderFile reads the custom headers of an HTTP upstream, one
// "Name: value" a line; blank lines and lines that start with # are
// skipped. The values are secrets (API keys, tokens): no error repeats
// one, only the line number and the header's name. A name given twice, a
// header that [HTTP] sets itself (Content-Type, Idempotency-Key,
// Content-Length, Host) and an empty value are errors.
func ParseHeaderFile(data []byte) (http.Header, error) {
	h := make(http.Header)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok || !headerToken(name):
			return nil, fmt.Errorf("line %d: not a header (write Name: value)", n)
		case value == "":
			return nil, fmt.Errorf("line %d: %s has no value", n, name)
		case strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
			return nil, fmt.Errorf("line %d: %s: the value has a control character", n, name)
		}
		name = http.CanonicalHeaderKey(name)
		switch name {
		case "Content-Type", "Idempotency-Key", "Content-Length", "Host":
			return nil, fmt.Errorf("line %d: %s is the gateway's to set", n, name)
		}
		if h.Get(name) != "" {
			return nil, fmt.Errorf("line %d: %s given twice", n, name)
		}
		h.Set(name, value)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return h, nil
}

// headerToken reports whether s is a header name: an RFC 9110 token.
func headerToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
