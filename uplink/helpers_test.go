package uplink

import (
	"net/http"
	"testing"

	"fieldlink/uplink/internal/httpc/httpctest"
)

// httpTestServer is the tests' HTTP server (see httpctest).
type httpTestServer = httpctest.Server

func httpTestNewServer(t *testing.T, tlsOn bool, answer func(w http.ResponseWriter, r *http.Request)) *httpTestServer {
	return httpctest.NewServer(t, tlsOn, answer)
}

// httpTestSender is the sender of an HTTP upstream at url, opened by its
// kind (registered by kinds_test.go) with the pool's defaults for batch
// and window.
func httpTestSender(t *testing.T, url string, batch, window int) Sender {
	t.Helper()
	c, err := Open(UpstreamConfig{URL: url}, PoolConfig{Batch: batch, Window: window * 8, GatewayID: "gw-1", Epoch: "ep7"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.Sender
}

// permanentErr is an upstream's refusal of the packets.
type permanentErr struct{ error }

func (permanentErr) Permanent() bool { return true }
func (p permanentErr) Unwrap() error { return p.error }
