package uplink

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// explain says in words, for the technician reading the status page, why
// an upstream failed: what the error means rather than where in the code
// it arose. It names no credential (the errors of this package never
// hold one).
func explain(err error) string {
	var (
		op  *net.OpError
		dns *net.DNSError
		he  *httpError
		ne  net.Error
	)
	addr := ""
	if errors.As(err, &op) && op.Addr != nil {
		addr = " " + op.Addr.String()
	}
	switch {
	case err == nil:
		return ""
	case errors.As(err, &he) && he.Kind != httpOther:
		return he.words(addr)
	case errors.Is(err, ErrMQTTClientIDInUse):
		return err.Error()
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: nothing listens at" + addr + " (the server is down, or the address is wrong)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to" + addr + " (the network is down, or the address is wrong)"
	case errors.As(err, &dns):
		return "the name " + dns.Name + " is not found (DNS: " + dns.Err + ")"
	case errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword), errors.Is(err, packets.ErrorRefusedNotAuthorised):
		return "the broker refuses the user name or password"
	case errors.Is(err, packets.ErrorRefusedIDRejected):
		return "the broker refuses this gateway's client id"
	case errors.Is(err, packets.ErrorRefusedServerUnavailable):
		return "the broker says it is unavailable"
	case errors.Is(err, errMQTTAckTimeout):
		return "the broker did not acknowledge a packet in time; the connection is made again"
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

// words says an HTTP exchange's failure by its kind; addr is " host:port"
// of the connection when the transport named it, "" otherwise.
func (e *httpError) words(addr string) string {
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
	case httpRefused:
		return "connection refused: nothing listens at" + addr + " (the server is down, or the address is wrong)"
	case httpTimeout:
		return "no answer in time from" + addr + " (the network or the server is slow or down)"
	case httpUnreachable:
		return "no route to" + addr + " (the network is down, or the address is wrong)"
	case httpDNS:
		if errors.As(e.Err, &dns) {
			return "the name " + dns.Name + " is not found (DNS: " + dns.Err + ")"
		}
		return "the name of" + addr + " is not found (DNS)"
	case httpTLS:
		return "TLS with" + addr + " failed: " + e.Err.Error() + " (check the server's certificate and tls.ca)"
	case httpClosed:
		return peer + " closed the connection"
	case httpAuth:
		w := peer + " refuses the credentials: " + e.Status
		if e.Message != "" {
			w += ": " + e.Message
		}
		return w
	}
	// httpAnswer: the server's own refusal, in its words.
	switch {
	case e.Message == "" && e.StatusCode == http.StatusNotFound && e.Peer == "":
		return "the server has no such path: " + e.Status
	case e.Message == "":
		return peer + " answers " + e.Status
	case e.Method != http.MethodPost:
		return peer + " answers " + e.Status + ": " + e.Message
	case e.Peer == "InfluxDB":
		return "InfluxDB refused the write: " + e.Message + influxHint(e.Message)
	}
	return peer + " refused the write (" + e.Status + "): " + e.Message
}

// influxHint is what to do about an InfluxDB refusal, after a dash; "" when
// its message says it well enough.
func influxHint(msg string) string {
	switch {
	case strings.Contains(msg, "database not found"), strings.Contains(msg, "bucket") && strings.Contains(msg, "not found"):
		return " — create it first"
	case strings.Contains(msg, "field type conflict"):
		return " — the field had another type before: rename the register, or drop the measurement"
	}
	return ""
}

// errNote is an error in words and when it happened.
type errNote struct {
	text string
	at   time.Time
}

// lastErr keeps the latest error noted; safe for concurrent use.
type lastErr struct{ p atomic.Pointer[errNote] }

// note records err (nil is ignored) at now.
func (l *lastErr) note(err error) {
	if err != nil {
		l.p.Store(&errNote{text: explain(err), at: time.Now()})
	}
}

// get returns the latest error in words and its time; "" if none.
func (l *lastErr) get() (string, time.Time) {
	if n := l.p.Load(); n != nil {
		return n.text, n.at
	}
	return "", time.Time{}
}

// newer is the later of two notes.
func newer(a string, at time.Time, b string, bt time.Time) (string, time.Time) {
	if b != "" && (a == "" || bt.After(at)) {
		return b, bt
	}
	return a, at
}
