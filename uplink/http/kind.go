package http

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"fieldlink/uplink"
	"fieldlink/uplink/internal/httpc"
)

// Kind is the kind of HTTP(S) upstreams, posting JSON or InfluxDB line
// protocol; register it with [uplink.Register].
type Kind struct{}

// Name is the URL without credentials or query.
func (Kind) Name(raw string) (string, error) {
	u, err := httpc.ParseURL(raw)
	if err != nil {
		return "", fmt.Errorf("uplink: http: %w", err)
	}
	return httpc.RedactURL(u), nil
}

// Open makes an upstream's publisher and sender: batches of pc.Batch
// records, an eighth of pc.Window in flight.
func (Kind) Open(u uplink.UpstreamConfig, pc uplink.PoolConfig) (*uplink.Conn, error) {
	h, err := New(Config{URL: u.URL, TLS: u.TLS, Username: u.Username, Password: u.Password,
		Encoding: u.Encoding, Token: u.Token, Header: u.Header, Timeout: u.Timeout,
		Logger: pc.Logger, GatewayID: pc.GatewayID, Epoch: pc.Epoch})
	if err != nil {
		return nil, err
	}
	s := NewSender(h, pc.Batch, max(1, pc.Window/8))
	return &uplink.Conn{Sender: s, Close: h.Close, ProbeResult: s.ProbeResult}, nil
}

// Explain says an upstream's refusal of a write in its words.
func (Kind) Explain(err error) (string, bool) {
	var he *httpc.Error
	if !errors.As(err, &he) || he.Kind != httpc.Answer || he.Message == "" || he.Method != http.MethodPost {
		return "", false
	}
	if he.Peer == "InfluxDB" {
		return "InfluxDB refused the write: " + he.Message + influxHint(he.Message), true
	}
	return "", false
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
