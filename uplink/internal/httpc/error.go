package httpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
)

// Kind is what kind of failure an [Error] is, decided where the
// failure arises (the transport's error, or the answer's status), so that
// the words for it (see explain) need not guess from a message.
type Kind uint8

const (
	Other       Kind = iota // none of the kinds below
	Refused                 // the connection was refused: nothing listens
	Timeout                 // no answer in time
	Unreachable             // no route to the host or its network
	DNS                     // the host name does not resolve
	TLS                     // the TLS handshake or the certificate failed
	Closed                  // the server closed the connection without an answer
	Auth                    // 401 or 403: the credentials are refused
	Answer                  // any other answer but a 2xx: the server's own refusal
)

var kindNames = [...]string{"other", "refused", "timeout", "unreachable", "dns", "tls", "closed", "authentication", "answer"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "httpKind(" + strconv.Itoa(int(k)) + ")"
}

// Error is the error of an HTTP exchange with an upstream that did not end
// in a 2xx: either an answer with another status (StatusCode != 0) or no
// usable answer at all (Err != nil: refused, reset, timeout, TLS, …).
type Error struct {
	Method     string        // POST for a publish, GET for probes, load and registry
	URL        string        // the upstream, without credentials or query
	Kind       Kind          // what failed
	Peer       string        // who answers, for words: "InfluxDB", or "" for the server
	StatusCode int           // 0 when no answer came
	Status     string        // e.g. "503 Service Unavailable"
	Body       string        // up to 200 bytes of the answer's body, secrets blanked
	Message    string        // the server's own message from Body, plain (see MessageOf)
	RetryAfter time.Duration // the answer's Retry-After, 0 if none (a hint, ≤ 24h)
	Err        error         // why no answer came; nil when StatusCode != 0
}

// Failed is the *Error of an exchange that got no answer, its kind
// read from err.
func Failed(method, name, peer string, err error) *Error {
	return &Error{Method: method, URL: name, Peer: peer, Kind: KindOf(err), Err: err}
}

// KindOf classifies a transport error.
func KindOf(err error) Kind {
	var (
		dns     *net.DNSError
		ne      net.Error
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
		verify  *tls.CertificateVerificationError
		record  tls.RecordHeaderError
		alert   tls.AlertError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Unreachable
	case errors.As(err, &dns):
		return DNS
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &host), errors.As(err, &verify),
		errors.As(err, &record), errors.As(err, &alert):
		return TLS
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return Timeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return Closed
	}
	return Other
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("uplink: http ")
	b.WriteString(e.Method)
	b.WriteByte(' ')
	b.WriteString(e.URL)
	b.WriteString(": ")
	if e.StatusCode == 0 {
		if e.Err != nil {
			b.WriteString(e.Err.Error())
		} else {
			b.WriteString("no answer")
		}
		return b.String()
	}
	if e.Status != "" {
		b.WriteString(e.Status)
	} else {
		b.WriteString(strconv.Itoa(e.StatusCode))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	if e.Message != "" {
		// As it is, once: a log quotes the whole error again.
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// MessageOf is the server's own message in an error answer's excerpt,
// plain: the "error" (InfluxDB 1.x) or "message" (InfluxDB 2.x and many
// APIs) of a JSON object, else the text itself; control characters become
// spaces. The excerpt is already free of secrets; they are blanked again
// in case JSON escaping hid one.
func MessageOf(excerpt string, secrets []string) string {
	msg := excerpt
	var obj struct {
		Error   *string `json:"error"`
		Message *string `json:"message"`
	}
	if json.Unmarshal([]byte(excerpt), &obj) == nil {
		switch {
		case obj.Error != nil && *obj.Error != "":
			msg = *obj.Error
		case obj.Message != nil && *obj.Message != "":
			msg = *obj.Message
		}
	}
	msg = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, msg)
	return Excerpt([]byte(msg), secrets)
}

// Unwrap returns the transport error, if any.
func (e *Error) Unwrap() error { return e.Err }

// CheckResponse consumes resp's body so that its connection can be
// reused, and returns nil for a 2xx or an *Error with an excerpt and
// the server's message; peer names the server for words ("" for none).
func CheckResponse(method, name, peer string, resp *http.Response, secrets []string) *Error {
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, DrainLimit))
		return nil
	}
	head := make([]byte, ExcerptLen)
	n, _ := io.ReadFull(resp.Body, head)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, DrainLimit))
	kind := Answer
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		kind = Auth
	}
	body := Excerpt(head[:n], secrets)
	return &Error{
		Method:     method,
		URL:        name,
		Kind:       kind,
		Peer:       peer,
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Body:       body,
		Message:    MessageOf(body, secrets),
		RetryAfter: ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// ParseRetryAfter reads delta-seconds or an HTTP date; 0 when absent,
// unreadable or past; capped at MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if strings.Trim(v, "0123456789") == "" { // delta-seconds
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter // only a range error is possible
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, MaxRetryAfter))
}
