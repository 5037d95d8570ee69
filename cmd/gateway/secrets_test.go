package main

// Secrets never leak: an upstream password given by password_file or by
// password_env, an HTTP upstream's token_file and headers_file, and a TLS
// client key, must not appear in anything the
// gateway prints, logs or serves (metrics, status page and its JSON),
// whatever goes wrong. These tests run the real binary, so that every
// byte it writes to stdout and stderr is seen,
// including what a library might print on its own.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// selfSigned writes a fresh key and self-signed certificate for 127.0.0.1
// as PEM files in dir and returns their paths and the key's PEM body.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string, pair tls.Certificate, keyBody string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair, base64.StdEncoding.EncodeToString(kder)
}

// tlsIngest is an HTTPS ingest endpoint that asks for a client certificate
// and refuses every request with status.
func tlsIngest(t *testing.T, pair tls.Certificate, status int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(status)
		fmt.Fprintln(w, "go away")
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	s.StartTLS()
	t.Cleanup(s.Close)
	return s, &n
}

// gatewayRun is one run of the binary: its combined output, and whatever
// the test fetched from it while it ran.
type gatewayRun struct {
	stdout bytes.Buffer
	stderr testtool.SyncBuffer // read by during while the gateway runs
	code   int
}

// runGateway runs bin with args and env until it exits, or for d and then
// SIGTERM (d > 0), calling during (if not nil) with the run while it runs.
func runGateway(t *testing.T, bin string, env []string, d time.Duration, during func(*gatewayRun), args ...string) *gatewayRun {
	t.Helper()
	r := &gatewayRun{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &r.stdout, &r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if d > 0 {
		if during != nil {
			during(r)
		}
		select {
		case err := <-exited:
			t.Fatalf("gateway %s exited early: %v\nstderr:\n%s", args[0], err, r.stderr.String())
		case <-time.After(d):
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("gateway %s did not exit within 60s", args[0])
	}
	r.code = cmd.ProcessState.ExitCode()
	return r
}

// windSite is the secrets and encoding tests' site: one anemometer on the
// emulator at emu, every 200ms, delivered to upstreams (each an upstream's
// YAML as a list item takes it) by gateway id, metrics on metrics.
func windSite(id, metrics, buffer, emu string, upstreams ...string) testtool.SiteFile {
	s := testtool.SiteFile{
		Gateway: id, Metrics: metrics, Buffer: buffer, Bus: "tcp://" + emu,
		Devices: []string{"{name: wind-1, profile: generic-wind-speed, slave: 1, interval: 200ms}"},
		Uplink:  []string{"probe: {interval: 500ms, timeout: 400ms}", "upstreams:"},
	}
	for _, u := range upstreams {
		s.Uplink = append(s.Uplink, "  - "+u)
	}
	return s
}

// leaks returns a description of every secret found in text.
func leaks(text string, secrets map[string]string) []string {
	var found []string
	for what, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			found = append(found, what)
		}
	}
	return found
}

func TestSecretsNeverLeak(t *testing.T) {
	mosq := testtool.FindMosquitto(t)
	mpasswd := testtool.Require(t, "mosquitto_passwd", "mosquitto")
	bin := testtool.BuildGateway(t)
	dir := t.TempDir()

	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	secret := "fl-pw-" + hex.EncodeToString(raw)
	envName := "FIELDLINK_TEST_SECRET_" + strings.ToUpper(hex.EncodeToString(raw[:4]))
	env := []string{envName + "=" + secret}
	pwFile := filepath.Join(dir, "mqtt.pass")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token, apiKey := "fl-tok-"+hex.EncodeToString(raw[8:]), "fl-key-"+hex.EncodeToString(raw[:8])
	tokFile, hdrFile := filepath.Join(dir, "ingest.token"), filepath.Join(dir, "ingest.headers")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hdrFile, []byte("X-Api-Key: "+apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey, _, keyBody := selfSigned(t, dir, "client")
	serverCert, _, serverPair, _ := selfSigned(t, dir, "server")

	secrets := map[string]string{
		"the password":                      secret,
		"the password, base64":              base64.StdEncoding.EncodeToString([]byte(secret)),
		"the basic auth token":              base64.StdEncoding.EncodeToString([]byte("gw-01:" + secret)),
		"the password, hex":                 hex.EncodeToString([]byte(secret)),
		"the token":                         token,
		"the header value":                  apiKey,
		"the client key's PEM body":         keyBody,
		"the client key's first PEM line":   keyBody[:64],
		"the client key's last PEM line":    keyBody[len(keyBody)/64*64:],
		"the client key's middle PEM chars": keyBody[40:100],
	}
	if len(keyBody)%64 < 16 {
		delete(secrets, "the client key's last PEM line") // too short to be telling
	}

	// A broker that knows gw-01 with another password: it rejects ours.
	brokerPw := filepath.Join(dir, "broker.passwd")
	if out, err := exec.Command(mpasswd, "-b", "-c", brokerPw, "gw-01", "not-the-secret").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
	}
	broker := testtool.StartMosquitto(t, mosq, "allow_anonymous false", "password_file "+brokerPw)
	ingest, ingestRequests := tlsIngest(t, serverPair, http.StatusUnauthorized)
	// An ingest that refuses and quotes what it got back (as some do): the
	// gateway must blank it out of the errors it logs.
	var echoed atomic.Value
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got := r.URL.Path + " " + r.Header.Get("Authorization") + " " + r.Header.Get("X-Api-Key")
		echoed.Store(got)
		http.Error(w, "refused: "+got, http.StatusUnauthorized)
	}))
	t.Cleanup(echo.Close)
	_, emu := serve(t, false, "generic-wind-speed")
	metricsAddr := "127.0.0.1:0" // the gateway's choice, read back from its log

	site := windSite("gw-secrets", metricsAddr, filepath.Join(dir, "buffer.db"), emu,
		fmt.Sprintf(`{url: "mqtt://%s", username: gw-01, password_file: %s}`, broker, pwFile),
		fmt.Sprintf(`url: "%s/ingest"
      username: gw-01
      password_env: %s
      tls: {ca: %s, cert: %s, key: %s}`, ingest.URL, envName, serverCert, clientCert, clientKey),
		fmt.Sprintf(`{url: "mqtt://%s", username: gw-01, password_env: %s}`, testtool.RefusedAddr(t), envName),
		fmt.Sprintf(`{url: "%s/write?db=farm", encoding: influx_line, token_file: %s, headers_file: %s}`, echo.URL, tokFile, hdrFile),
		fmt.Sprintf(`{url: "%s/ingest", token_file: %s}`, echo.URL, tokFile)).String()
	good := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(good, []byte(site), 0o600); err != nil {
		t.Fatal(err)
	}
	invalid := filepath.Join(dir, "invalid.yaml")
	if err := os.WriteFile(invalid, []byte(strings.Replace(site, "interval: 200ms}", "interval: 200ms, bogus: 1}", 1)+
		fmt.Sprintf("    - {url: \"mqtt://gw-01:%s@%s\"}\n    - {url: \"https://gw-01:%s@[::1\"}\n", secret, broker, secret)), 0o600); err != nil {
		t.Fatal(err)
	}

	outputs := map[string]string{}
	record := func(name string, r *gatewayRun) {
		outputs[name+" stdout"] = r.stdout.String()
		outputs[name+" stderr"] = r.stderr.String()
	}

	r := runGateway(t, bin, env, 0, nil, "check", "-c", good)
	if r.code != 0 {
		t.Fatalf("check of the good file: exit %d\n%s%s", r.code, r.stdout.String(), r.stderr.String())
	}
	record("check", r)
	r = runGateway(t, bin, env, 0, nil, "check", "-c", invalid)
	if r.code != 1 || !strings.Contains(r.stderr.String()+r.stdout.String(), "bogus") {
		t.Fatalf("check of the invalid file: exit %d\n%s%s", r.code, r.stdout.String(), r.stderr.String())
	}
	record("check (invalid)", r)

	var scraped []string
	scrape := func(r *gatewayRun) {
		metricsAddr := testtool.MetricsAddr(t, r.stderr.String)
		get := func(path string) (string, bool) {
			code, body, err := testtool.Get("http://" + metricsAddr + path)
			if err != nil {
				return "", false
			}
			return body, code == http.StatusOK || path != "/metrics"
		}
		testtool.WaitFor(t, 20*time.Second, "the metrics endpoint", func() bool {
			_, ok := get("/metrics")
			return ok
		})
		// Let the uplink fail a few times first.
		testtool.WaitFor(t, 20*time.Second, "the HTTPS ingest to refuse a request", func() bool {
			return ingestRequests.Load() > 0
		})
		testtool.WaitFor(t, 20*time.Second, "more refusals, for the metrics to count", func() bool {
			return ingestRequests.Load() >= 3
		})
		for _, p := range []string{"/metrics", "/healthz", "/readyz", "/", "/?raw=1", "/status.json"} {
			body, _ := get(p)
			if p == "/status.json" {
				testtool.ValidStatus(t, []byte(body))
			}
			scraped = append(scraped, body)
		}
	}
	r = runGateway(t, bin, env, time.Second, scrape, "run", "-c", good, "-log-level", "debug")
	record("run", r)
	outputs["metrics"] = strings.Join(scraped, "\n")

	// The run did what it must have for the check to mean something: debug
	// logging on, the metrics served, the broker and the ingest refusing.
	runLog := r.stderr.String()
	if !strings.Contains(runLog, "DEBUG") {
		t.Errorf("no debug lines in the run's log:\n%s", runLog)
	}
	if !strings.Contains(outputs["metrics"], "fieldlink_") {
		t.Errorf("the metrics text has no fieldlink_ series:\n%s", outputs["metrics"])
	}
	if !strings.Contains(outputs["metrics"], `data-device="wind-1"`) || !strings.Contains(outputs["metrics"], `"upstreams": [`) {
		t.Errorf("the status page or its JSON was not served:\n%s", outputs["metrics"])
	}
	if ingestRequests.Load() == 0 {
		t.Error("the HTTPS ingest saw no request: the password was never sent")
	}
	if got, _ := echoed.Load().(string); !strings.Contains(got, "/write Token "+token+" "+apiKey) && !strings.Contains(got, "/ingest Bearer "+token) {
		t.Errorf("the echoing ingest never got the token and the header: last request %q", got)
	}
	if !strings.Contains(runLog, broker) || !strings.Contains(strings.ToLower(runLog), "authorized") {
		t.Errorf("the log never says that the broker %s refused the credentials", broker)
	}

	for name, text := range outputs {
		if found := leaks(text, secrets); len(found) > 0 {
			t.Errorf("%s shows %s:\n%s", name, strings.Join(found, ", "), text)
		}
	}
	if t.Failed() {
		t.Logf("run log:\n%s", runLog)
	}
}

// insecure_skip_verify is off unless the site file says so: without it a
// server that the CA did not sign is refused; with it the gateway warns,
// at check and at run time.
func TestInsecureSkipVerifyIsExplicitAndLoud(t *testing.T) {
	bin := testtool.BuildGateway(t)
	dir := t.TempDir()
	_, _, serverPair, _ := selfSigned(t, dir, "server")
	_, emu := serve(t, false, "generic-wind-speed")
	for _, tc := range []struct {
		name     string
		tls      string
		accepted bool
	}{
		{"default", "", false},
		{"explicitly false", "tls: {insecure_skip_verify: false}", false},
		{"explicitly true", "tls: {insecure_skip_verify: true}", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ingest, requests := tlsIngest(t, serverPair, http.StatusOK)
			tlsLine := ""
			if tc.tls != "" {
				tlsLine = ", " + tc.tls
			}
			dir := t.TempDir()
			site := windSite("gw-tls", "off", filepath.Join(dir, "buffer.db"), emu, fmt.Sprintf(`{url: "%s/ingest"%s}`, ingest.URL, tlsLine)).Write(t, dir)
			check := runGateway(t, bin, nil, 0, nil, "check", "-c", site)
			warned := strings.Contains(check.stderr.String(), "warning:") && strings.Contains(check.stderr.String(), "will NOT be verified")
			if check.code != 0 || warned != tc.accepted {
				t.Errorf("check: exit %d, warning %v (want %v):\n%s", check.code, warned, tc.accepted, check.stderr.String())
			}
			run := runGateway(t, bin, nil, 3*time.Second, nil, "run", "-c", site)
			runLog := run.stderr.String()
			loud := strings.Contains(runLog, "level=WARN") && strings.Contains(runLog, "verification is OFF")
			if loud != tc.accepted {
				t.Errorf("run: warning logged %v, want %v:\n%s", loud, tc.accepted, runLog)
			}
			if got := requests.Load() > 0; got != tc.accepted {
				t.Errorf("the ingest, whose certificate no CA signed, got requests: %v, want %v:\n%s", got, tc.accepted, runLog)
			}
		})
	}
}
