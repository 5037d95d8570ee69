package testtool

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are PEM files made by MakeCerts, for the TLS tests of the MQTT
// and HTTP upstreams.
type Certs struct {
	CA, ServerCert, ServerKey string // the CA, and the server's for 127.0.0.1 and localhost
	ClientCert, ClientKey     string // a client certificate signed by the CA
	OtherCA                   string // a CA that signed nothing here
	// Server certificates by the same CA, with serverKey, that a client must
	// refuse: one expired yesterday, one for another host name.
	ExpiredCert, WrongNameCert string
}

// MakeCerts writes a CA, a server certificate for 127.0.0.1 and
// localhost, a client certificate, and an unrelated CA into a temp dir.
func MakeCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	f := &Certs{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
		OtherCA:    filepath.Join(dir, "other-ca.pem"),

		ExpiredCert:   filepath.Join(dir, "server-expired.pem"),
		WrongNameCert: filepath.Join(dir, "server-wrong-name.pem"),
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
	ca, caKey := newCA("fieldlink test CA", f.CA)
	newCA("some other CA", f.OtherCA)

	sk := newKey()
	sc := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &sk.PublicKey, caKey)
	write(f.ServerCert, "CERTIFICATE", sc.Raw)
	writeKey(f.ServerKey, sk)

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
	write(f.ExpiredCert, "CERTIFICATE", der)
	wn := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "ingest.example.com"},
		DNSNames:    []string{"ingest.example.com"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &sk.PublicKey, caKey)
	write(f.WrongNameCert, "CERTIFICATE", wn.Raw)

	ck := newKey()
	cc := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "fieldlink-gw1"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &ck.PublicKey, caKey)
	write(f.ClientCert, "CERTIFICATE", cc.Raw)
	writeKey(f.ClientKey, ck)
	return f
}
