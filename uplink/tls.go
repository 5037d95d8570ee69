package uplink

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSConfig builds the client TLS configuration of an upstream (MQTT or
// HTTPS) from PEM files, as the site config names them:
//   - caFile: the CA certificates that sign the server's certificate; empty
//     means the system roots.
//   - certFile and keyFile: the client certificate and its private key, for
//     mutual TLS; both or neither.
//   - insecureSkipVerify: do not verify the server at all. Only for tests
//     and first set-up; the caller should log a warning when it is set.
//
// The server is verified by default, TLS 1.2 at least. The server name is
// left empty: the dialer takes it from the URL's host. Errors name the file,
// never its contents.
func TLSConfig(caFile, certFile, keyFile string, insecureSkipVerify bool) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: insecureSkipVerify, // the site config asks for it: see above
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("uplink: tls: ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("uplink: tls: ca %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "" || keyFile == "":
		return nil, errors.New("uplink: tls: a client certificate needs both cert and key")
	default:
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("uplink: tls: client certificate %s with key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
