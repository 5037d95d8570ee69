package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fieldlink/uplink/mqtt/mqtttest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink"
)

func TestMQTTTLSConfigFiles(t *testing.T) {
	certs := testtool.MakeCerts(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name                string
		ca, cert, key       string
		insecure            bool
		wantErr             string // substring; "" means success
		wantRoots, wantCert bool
	}{
		{name: "system roots", wantErr: ""},
		{name: "ca", ca: certs.CA, wantRoots: true},
		{name: "mutual", ca: certs.CA, cert: certs.ClientCert, key: certs.ClientKey, wantRoots: true, wantCert: true},
		{name: "insecure", insecure: true},
		{name: "ca missing", ca: missing, wantErr: "missing.pem"},
		{name: "ca not PEM", ca: notPEM, wantErr: "no PEM certificate"},
		{name: "cert without key", cert: certs.ClientCert, wantErr: "both cert and key"},
		{name: "key without cert", key: certs.ClientKey, wantErr: "both cert and key"},
		{name: "key does not match", cert: certs.ClientCert, key: certs.ServerKey, wantErr: "client certificate"},
		{name: "key not PEM", cert: certs.ClientCert, key: notPEM, wantErr: "not.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := uplink.TLSConfig(tt.ca, tt.cert, tt.key, tt.insecure)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MinVersion < tls.VersionTLS12 {
				t.Errorf("MinVersion = %x, want TLS 1.2 at least", cfg.MinVersion)
			}
			if cfg.InsecureSkipVerify != tt.insecure {
				t.Errorf("InsecureSkipVerify = %v", cfg.InsecureSkipVerify)
			}
			if (cfg.RootCAs != nil) != tt.wantRoots || (len(cfg.Certificates) == 1) != tt.wantCert {
				t.Errorf("RootCAs set %v, %d certificates", cfg.RootCAs != nil, len(cfg.Certificates))
			}
		})
	}
}

// TestMQTTTLS runs mosquitto with two TLS listeners on certificates made
// here: one verifying nothing of the client, one requiring a client
// certificate.
func TestMQTTTLS(t *testing.T) {
	certs := testtool.MakeCerts(t)
	plain := mqtttest.Broker(t, mqtttest.BrokerOptions{TLS: certs})
	mutual := mqtttest.Broker(t, mqtttest.BrokerOptions{TLS: certs, MTLS: true})
	withCert := func(cert string) *testtool.Mosquitto {
		c := *certs
		c.ServerCert = cert
		return mqtttest.Broker(t, mqtttest.BrokerOptions{TLS: &c})
	}
	expired, wrongName := withCert(certs.ExpiredCert), withCert(certs.WrongNameCert)
	tlsURL := func(b *testtool.Mosquitto) string { return "mqtts://" + b.Addr() }

	mustTLS := func(ca, cert, key string, insecure bool) *tls.Config {
		t.Helper()
		c, err := uplink.TLSConfig(ca, cert, key, insecure)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		name   string
		url    string
		tls    *tls.Config
		wantOK bool
		errHas string // in the error of a failing Publish
	}{
		{"server verified by our CA", tlsURL(plain), mustTLS(certs.CA, "", "", false), true, ""},
		{"server verified by host name localhost", "mqtts://localhost:" + strings.Split(plain.Addr(), ":")[1], mustTLS(certs.CA, "", "", false), true, ""},
		{"wrong CA", tlsURL(plain), mustTLS(certs.OtherCA, "", "", false), false, "certificate"},
		{"system roots do not know the test CA", tlsURL(plain), nil, false, "certificate"},
		{"wrong CA, verification off", tlsURL(plain), mustTLS(certs.OtherCA, "", "", true), true, ""},
		{"expired server certificate", tlsURL(expired), mustTLS(certs.CA, "", "", false), false, "expired"},
		{"server certificate for another host name", tlsURL(wrongName), mustTLS(certs.CA, "", "", false), false, "127.0.0.1"},
		{"server certificate for another host name, by name", "mqtts://localhost:" + strings.Split(wrongName.Addr(), ":")[1], mustTLS(certs.CA, "", "", false), false, "not localhost"},
		{"mutual TLS with client certificate", tlsURL(mutual), mustTLS(certs.CA, certs.ClientCert, certs.ClientKey, false), true, ""},
		{"mutual TLS without client certificate", tlsURL(mutual), mustTLS(certs.CA, "", "", false), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _ := mqttRun(t, mqttConfig{URL: tt.url, TLS: tt.tls, ConnectTimeout: 2 * time.Second})
			ctx := context.Background()
			if tt.wantOK {
				mqtttest.WaitConnected(t, m.Connected, true)
				if err := m.publish(ctx, map[string]string{"data_type": "tls"}, []byte("x")); err != nil {
					t.Fatalf("Publish: %v", err)
				}
				return
			}
			// Refused: publish fails at once, and says why once Run has tried.
			var err error
			testtool.WaitFor(t, 10*time.Second, "a connect error", func() bool {
				err = m.publish(ctx, map[string]string{"data_type": "tls"}, []byte("x"))
				return err != nil && strings.Contains(err.Error(), "last error")
			})
			if !errors.Is(err, errMQTTNotConnected) || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("Publish error = %v, want ErrMQTTNotConnected naming %q", err, tt.errHas)
			}
			if m.Connected() {
				t.Fatal("Connected() = true over a refused TLS link")
			}
			t.Logf("refused as expected: %v", err)
		})
	}
}

func TestMQTTTLSNeedsMQTTS(t *testing.T) {
	_, err := newMQTT(mqttConfig{URL: "mqtt://127.0.0.1:1883", TLS: &tls.Config{}, Vars: map[string]string{"site": "s", "gateway": "g"}})
	if err == nil || !strings.Contains(err.Error(), "mqtts://") {
		t.Fatalf("TLS config with a mqtt:// URL: err = %v, want a refusal", err)
	}
}
