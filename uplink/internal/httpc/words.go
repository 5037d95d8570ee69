package httpc

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Words says an HTTP exchange's failure by its kind; addr is " host:port"
// of the connection when the transport named it, "" otherwise.
func (e *Error) Words(addr string) string {
	peer := e.Peer
	if peer == "" {
		peer = "the server"
	}
	if addr == "" {
		if u, err := url.Parse(strings.TrimSuffix(e.URL, "?...")); err == nil && u.Host != "" {
			addr = " " + u.Host
		}
	}
	var dns *net.DNSError
	switch e.Kind {
	case Refused:
		return "connection refused: nothing listens at" + addr + " (the server is down, or the address is wrong)"
	case Timeout:
		return "no answer in time from" + addr + " (the network or the server is slow or down)"
	case Unreachable:
		return "no route to" + addr + " (the network is down, or the address is wrong)"
	case DNS:
		if errors.As(e.Err, &dns) {
			return "the name " + dns.Name + " is not found (DNS: " + dns.Err + ")"
		}
		return "the name of" + addr + " is not found (DNS)"
	case TLS:
		return "TLS with" + addr + " failed: " + e.Err.Error() + " (check the server's certificate and tls.ca)"
	case Closed:
		return peer + " closed the connection"
	case Auth:
		w := peer + " refuses the credentials: " + e.Status
		if e.Message != "" {
			w += ": " + e.Message
		}
		return w
	}
	// Answer: the server's own refusal, in its words.
	switch {
	case e.Message == "" && e.StatusCode == http.StatusNotFound && e.Peer == "":
		return "the server has no such path: " + e.Status
	case e.Message == "":
		return peer + " answers " + e.Status
	case e.Method != http.MethodPost:
		return peer + " answers " + e.Status + ": " + e.Message
	}
	return peer + " refused the write (" + e.Status + "): " + e.Message
}
