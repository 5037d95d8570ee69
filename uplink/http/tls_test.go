package http

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink"
	"fieldlink/uplink/internal/httpc"
)

// httpTestCA returns a pool holding a fresh CA that signed nothing.
func httpTestCA(t *testing.T) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fieldlink test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

func TestHTTPTLS(t *testing.T) {
	srv := httpTestNewServer(t, true, func(w http.ResponseWriter, r *http.Request) {})
	good := x509.NewCertPool()
	good.AddCert(srv.Certificate())

	h := httpTestPublisher(t, Config{URL: srv.URL, TLS: &tls.Config{RootCAs: good}})
	if err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)}); err != nil {
		t.Fatalf("Post over TLS with the server's CA: %v", err)
	}

	for name, cfg := range map[string]*tls.Config{
		"system roots": nil,
		"empty config": {},
		"other CA":     {RootCAs: httpTestCA(t)},
	} {
		t.Run(name, func(t *testing.T) {
			h := httpTestPublisher(t, Config{URL: srv.URL, TLS: cfg})
			err := h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
			if err == nil {
				t.Fatal("Post succeeded with a CA that did not sign the server's certificate")
			}
			var cve *tls.CertificateVerificationError
			if !errors.As(err, &cve) {
				t.Errorf("error %v is not a certificate verification error", err)
			}
			if refusesPackets(err) || httpc.Retryable(err) {
				t.Errorf("TLS failure: permanent %v, retryable %v; want neither", refusesPackets(err), httpc.Retryable(err))
			}
		})
	}
	if got := len(srv.Seen()); got != 1 {
		t.Errorf("server handled %d requests, want only the verified one", got)
	}
}

// TestHTTPSRefusesBadServerCertificates: over https:// an expired server
// certificate and one for another host name are refused with a
// verification error, by the CA that signed them, and the server sees no
// request.
func TestHTTPSRefusesBadServerCertificates(t *testing.T) {
	certs := testtool.MakeCerts(t)
	for _, tc := range []struct {
		name, cert, host, want string
	}{
		{"expired", certs.ExpiredCert, "127.0.0.1", "expired"},
		{"another host name", certs.WrongNameCert, "localhost", "not localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := tls.LoadX509KeyPair(tc.cert, certs.ServerKey)
			if err != nil {
				t.Fatal(err)
			}
			var hits atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
			srv.StartTLS()
			defer srv.Close()
			cfg, err := uplink.TLSConfig(certs.CA, "", "", false)
			if err != nil {
				t.Fatal(err)
			}
			url := "https://" + tc.host + ":" + strings.Split(srv.Listener.Addr().String(), ":")[1]
			h := httpTestPublisher(t, Config{URL: url, TLS: cfg})
			err = h.post(context.Background(), []uint64{1}, [][]byte{httpTestPacket(1)})
			var cve *tls.CertificateVerificationError
			if !errors.As(err, &cve) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Post error = %v, want a certificate verification error saying %q", err, tc.want)
			}
			if hits.Load() != 0 {
				t.Fatalf("the server handled %d requests", hits.Load())
			}
		})
	}
}
