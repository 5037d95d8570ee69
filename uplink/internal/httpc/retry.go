package httpc

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
)

// Retryable reports whether err is a transient failure, worth retrying
// soon, on this or another upstream: an answer 408, 409, 425, 429 or 5xx, or
// no answer because of a timeout (including ctx's deadline), a refused,
// reset, aborted or unreachable connection, a connection closed before the
// answer (EOF), or a DNS failure. The delivery loop treats every failure but
// a refusal of the packets alike: the tests of the uplink and its kinds
// use this to check that errors keep what tells them apart.
//
// Errors that are not retryable: the caller cancelled ctx; TLS failures (an
// unverifiable certificate, a TLS alert: configuration, not weather); a
// 1xx/3xx answer (redirects are not followed); 4xx other than those above;
// bad arguments.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var he *Error
	if errors.As(err, &he) && he.StatusCode != 0 {
		return retryableStatus(he.StatusCode)
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if isTLSFailure(err) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, target := range []error{
		syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		io.EOF, io.ErrUnexpectedEOF,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr)
}

func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500 && code <= 599
}

// isTLSFailure reports a TLS failure, or an alert that crypto/tls reports
// as a *net.OpError.
func isTLSFailure(err error) bool {
	if KindOf(err) == TLS {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && (opErr.Op == "remote error" || opErr.Op == "local error")
}
