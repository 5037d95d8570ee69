package http

import (
	"net/http"
	"strconv"
	"testing"

	"fieldlink/uplink"
	"fieldlink/uplink/internal/httpc/httpctest"
)

// httpTestServer is the tests' HTTP server (see httpctest).
type httpTestServer = httpctest.Server

func httpTestNewServer(t *testing.T, tlsOn bool, answer func(w http.ResponseWriter, r *http.Request)) *httpTestServer {
	return httpctest.NewServer(t, tlsOn, answer)
}

func httpTestPublisher(t *testing.T, cfg Config) *HTTP {
	t.Helper()
	if cfg.GatewayID == "" {
		cfg.GatewayID = "gw-1"
	}
	if cfg.Epoch == "" {
		cfg.Epoch = "ep7"
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func httpTestPacket(seq int) []byte {
	return []byte(`{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","DataType":"Rain","GatewayId":"gw-1","Seq":` +
		strconv.Itoa(seq) + `},"DataBody":{"Rainfall":"0"}}`)
}

// The kind is registered for its tests as kinds registers it.
func init() {
	uplink.Register([]string{"http", "https"}, []uplink.Encoding{uplink.EncodingJSON, uplink.EncodingInfluxLine}, Kind{})
}
