package uplink

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// mqttCertFiles are PEM files made by mqttMakeCerts.
type mqttCertFiles struct {
	ca, serverCert, serverKey string // the CA, and the server's for 127.0.0.1 and localhost
	clientCert, clientKey     string // a client certificate signed by the CA
	otherCA                   string // a CA that signed nothing here
	// Server certificates by the same CA, with serverKey, that a client must
	// refuse: one expired yesterday, one for another host name.
	expiredCert, wrongNameCert string
}

// mqttMakeCerts writes a CA, a server certificate for 127.0.0.1 and
// localhost, a client certificate, and an unrelated CA into a temp dir.
func mqttMakeCerts(t testing.TB) *mqttCertFiles {
	t.Helper()
	dir := t.TempDir()
	f := &mqttCertFiles{
		ca:         filepath.Join(dir, "ca.pem"),
		serverCert: filepath.Join(dir, "server.pem"),
		serverKey:  filepath.Join(dir, "server-key.pem"),
		clientCert: filepath.Join(dir, "client.pem"),
		clientKey:  filepath.Join(dir, "client-key.pem"),
		otherCA:    filepath.Join(dir, "other-ca.pem"),

		expiredCert:   filepath.Join(dir, "server-expired.pem"),
		wrongNameCert: filepath.Join(dir, "server-wrong-name.pem"),
	}
	serial := int64(1)
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(path, typ string, der []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKey := func(path string, k *ecdsa.PrivateKey) {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		write(path, "PRIVATE KEY", der)
	}
	issue := func(tmpl, parent *x509.Certificate, pub, signer any) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore = time.Now().Add(-time.Hour)
		tmpl.NotAfter = time.Now().Add(24 * time.Hour)
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	newCA := func(name, path string) (*x509.Certificate, *ecdsa.PrivateKey) {
		k := newKey()
		c := issue(&x509.Certificate{
			Subject:               pkix.Name{CommonName: name},
			IsCA:                  true,
			BasicConstraintsValid: true,
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		}, nil, &k.PublicKey, k)
		write(path, "CERTIFICATE", c.Raw)
		return c, k
	}
	ca, caKey := newCA("fieldlink test CA", f.ca)
	newCA("some other CA", f.otherCA)

	sk := newKey()
	sc := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &sk.PublicKey, caKey)
	write(f.serverCert, "CERTIFICATE", sc.Raw)
	writeKey(f.serverKey, sk)

	expired := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	serial++
	expired.SerialNumber = big.NewInt(serial)
	expired.NotBefore, expired.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, expired, ca, &sk.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write(f.expiredCert, "CERTIFICATE", der)
	wn := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "ingest.example.com"},
		DNSNames:    []string{"ingest.example.com"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &sk.PublicKey, caKey)
	write(f.wrongNameCert, "CERTIFICATE", wn.Raw)

	ck := newKey()
	cc := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "fieldlink-gw1"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &ck.PublicKey, caKey)
	write(f.clientCert, "CERTIFICATE", cc.Raw)
	writeKey(f.clientKey, ck)
	return f
}

func TestMQTTTLSConfigFiles(t *testing.T) {
	certs := mqttMakeCerts(t)
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
		{name: "ca", ca: certs.ca, wantRoots: true},
		{name: "mutual", ca: certs.ca, cert: certs.clientCert, key: certs.clientKey, wantRoots: true, wantCert: true},
		{name: "insecure", insecure: true},
		{name: "ca missing", ca: missing, wantErr: "missing.pem"},
		{name: "ca not PEM", ca: notPEM, wantErr: "no PEM certificate"},
		{name: "cert without key", cert: certs.clientCert, wantErr: "both cert and key"},
		{name: "key without cert", key: certs.clientKey, wantErr: "both cert and key"},
		{name: "key does not match", cert: certs.clientCert, key: certs.serverKey, wantErr: "client certificate"},
		{name: "key not PEM", cert: certs.clientCert, key: notPEM, wantErr: "not.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := TLSConfig(tt.ca, tt.cert, tt.key, tt.insecure)
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
	certs := mqttMakeCerts(t)
	plain := mqttStartBroker(t, mqttBrokerOpts{tls: certs})
	mutual := mqttStartBroker(t, mqttBrokerOpts{tls: certs, mtls: true})
	withCert := func(cert string) *testtool.Mosquitto {
		c := *certs
		c.serverCert = cert
		return mqttStartBroker(t, mqttBrokerOpts{tls: &c})
	}
	expired, wrongName := withCert(certs.expiredCert), withCert(certs.wrongNameCert)
	tlsURL := func(b *testtool.Mosquitto) string { return "mqtts://" + b.Addr() }

	mustTLS := func(ca, cert, key string, insecure bool) *tls.Config {
		t.Helper()
		c, err := TLSConfig(ca, cert, key, insecure)
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
		{"server verified by our CA", tlsURL(plain), mustTLS(certs.ca, "", "", false), true, ""},
		{"server verified by host name localhost", "mqtts://localhost:" + strings.Split(plain.Addr(), ":")[1], mustTLS(certs.ca, "", "", false), true, ""},
		{"wrong CA", tlsURL(plain), mustTLS(certs.otherCA, "", "", false), false, "certificate"},
		{"system roots do not know the test CA", tlsURL(plain), nil, false, "certificate"},
		{"wrong CA, verification off", tlsURL(plain), mustTLS(certs.otherCA, "", "", true), true, ""},
		{"expired server certificate", tlsURL(expired), mustTLS(certs.ca, "", "", false), false, "expired"},
		{"server certificate for another host name", tlsURL(wrongName), mustTLS(certs.ca, "", "", false), false, "127.0.0.1"},
		{"server certificate for another host name, by name", "mqtts://localhost:" + strings.Split(wrongName.Addr(), ":")[1], mustTLS(certs.ca, "", "", false), false, "not localhost"},
		{"mutual TLS with client certificate", tlsURL(mutual), mustTLS(certs.ca, certs.clientCert, certs.clientKey, false), true, ""},
		{"mutual TLS without client certificate", tlsURL(mutual), mustTLS(certs.ca, "", "", false), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _ := mqttRun(t, mqttConfig{URL: tt.url, TLS: tt.tls, ConnectTimeout: 2 * time.Second})
			ctx := context.Background()
			if tt.wantOK {
				mqttWaitConnected(t, m, true)
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
