package testtool

import (
	"crypto/ed25519"
	"testing"

	"fieldlink/internal/signing"
)

// SigningKeyFiles writes a new key pair as name.key and name.pub, as
// gateway keygen does, and returns its private key, read back from name.key.
func SigningKeyFiles(t testing.TB, name string) ed25519.PrivateKey {
	t.Helper()
	if _, err := signing.GenerateFiles(name); err != nil {
		t.Fatal(err)
	}
	priv, err := signing.LoadPrivate(name + signing.PrivateSuffix)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}
