package uplink

import (
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"fieldlink/uplink/internal/httpc"
)

// Explain says in words, for the technician reading the status page, why
// an upstream failed: what the error means rather than where in the code
// it arose. The kind whose error it is says it first. It names no
// credential (the errors of the uplink never hold one).
func Explain(err error) string {
	if err == nil {
		return ""
	}
	kinds.RLock()
	list := kinds.list
	kinds.RUnlock()
	for _, e := range list {
		if w, ok := e.kind.Explain(err); ok {
			return w
		}
	}
	return explain(err)
}

// explain says the errors that are no kind's own.
func explain(err error) string {
	var (
		op  *net.OpError
		dns *net.DNSError
		he  *httpc.Error
		ne  net.Error
	)
	addr := ""
	if errors.As(err, &op) && op.Addr != nil {
		addr = " " + op.Addr.String()
	}
	switch {
	case err == nil:
		return ""
	case errors.As(err, &he) && he.Kind != httpc.Other:
		return he.Words(addr)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: nothing listens at" + addr + " (the server is down, or the address is wrong)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to" + addr + " (the network is down, or the address is wrong)"
	case errors.As(err, &dns):
		return "the name " + dns.Name + " is not found (DNS: " + dns.Err + ")"
	case errors.As(err, &he) && he.StatusCode != 0:
		switch he.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return "the server refuses the credentials: " + he.Status
		case http.StatusNotFound:
			return "the server has no such path: " + he.Status
		}
		return "the server answers " + he.Status
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return "the server closed the connection"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer in time from" + addr + " (the network or the server is slow or down)"
	}
	return err.Error()
}

// newer is the later of two notes.
func newer(a string, at time.Time, b string, bt time.Time) (string, time.Time) {
	if b != "" && (a == "" || bt.After(at)) {
		return b, bt
	}
	return a, at
}
