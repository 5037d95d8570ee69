package http

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

func TestHTTPSecretsNeverShown(t *testing.T) {
	const user, password = "gateway-7", "S3cret-Pa55w0rd!"
	token := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	var logs testtool.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// The server echoes the request's credentials back in its error bodies.
	var srv *httpTestServer
	srv = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			srv.Hang(r)
		case "/ok":
		default:
			_, pw, _ := r.BasicAuth()
			w.WriteHeader(map[string]int{"/401": 401, "/500": 500}[r.URL.Path])
			io.WriteString(w, "auth was "+r.Header.Get("Authorization")+" password "+pw)
		}
	})
	tlsSrv := httpTestNewServer(t, true, func(w http.ResponseWriter, r *http.Request) {})
	deadAddr := testtool.RefusedAddr(t)

	var errs []error
	for _, cfg := range []Config{
		{URL: srv.URL + "/ok", Username: user, Password: password},
		{URL: srv.URL + "/401", Username: user, Password: password},
		{URL: srv.URL + "/500", Username: user, Password: password},
		{URL: strings.Replace(srv.URL, "http://", "http://"+user+":"+password+"@", 1) + "/401"},
		{URL: srv.URL + "/hang", Username: user, Password: password, Timeout: 100 * time.Millisecond},
		{URL: "http://" + user + ":" + password + "@" + deadAddr + "/x"},
		{URL: tlsSrv.URL, Username: user, Password: password},
		{URL: "ftp://" + user + ":" + password + "@example.com/"},
		{URL: "http://" + user + ":" + password + "@example.com:bad/"},
	} {
		cfg.Logger = logger
		cfg.GatewayID, cfg.Epoch = "gw", "ep"
		h, err := New(cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if name := h.Name(); strings.Contains(name, password) || strings.Contains(name, user) {
			t.Errorf("Name() = %q shows credentials", name)
		}
		errs = append(errs, h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)}))
		h.Close()
	}
	var nerr int
	for _, err := range errs {
		if err == nil {
			continue
		}
		nerr++
		msg := err.Error()
		if strings.Contains(msg, password) || strings.Contains(msg, token) {
			t.Errorf("error shows a secret: %s", msg)
		}
	}
	if nerr < 7 {
		t.Errorf("only %d errors: the scenarios did not run", nerr)
	}
	if !strings.Contains(logs.String(), "uplink: http post") {
		t.Errorf("no log lines captured:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), password) || strings.Contains(logs.String(), token) {
		t.Errorf("a log line shows a secret:\n%s", logs.String())
	}
	// The echoing server did see the credentials: the test is not vacuous.
	for _, r := range srv.Seen() {
		if r.Path == "/401" && r.Header.Get("Authorization") != "Basic "+token {
			t.Errorf("request to /401 had Authorization %q", r.Header.Get("Authorization"))
		}
	}
}
