package downlink

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"

	"fieldlink/internal/signing"
)

// signingContext is the use a command signature is made for (see package
// signing): a command signature is good for nothing else. v2 binds the
// command to a site and a gateway; a v1 signature (which named neither)
// verifies as nothing.
const signingContext = "fieldlink command v2"

// SignedMessage returns what a command signature signs (under
// signingContext): the fields site, gateway, id, device, point, value,
// issued_at, expires_at and actor, in that order, each as a netstring
// "<length in bytes>:<bytes>," of its text as sent (strings unescaped, the
// value as its JSON text, absent fields empty). A signer builds it from the
// strings it puts in the JSON, with nothing to canonicalise. Site and
// gateway come first: what a command is for, then what it does.
func (c Command) SignedMessage() []byte {
	b := make([]byte, 0, 224)
	for _, f := range []string{c.Site, c.Gateway, c.ID, c.Device, c.Point, c.Value.String(), c.IssuedAt.String(), c.ExpiresAt.String(), c.Actor} {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
		b = append(b, ',')
	}
	return b
}

// Sign returns c signed with key.
func Sign(c Command, key ed25519.PrivateKey) Command {
	c.Signature = base64.StdEncoding.EncodeToString(signing.Sign(key, signingContext, c.SignedMessage()))
	return c
}

// Verify checks c's signature against keys: nil if one of them signed it.
// With no keys it fails: a site without keys does not call it.
func (c Command) Verify(keys []ed25519.PublicKey) error {
	if c.Signature == "" {
		return fmt.Errorf("command %s: unsigned, and this gateway runs signed commands only", c.ID)
	}
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	if err != nil {
		return fmt.Errorf("command %s: signature: not base64", c.ID)
	}
	if err := signing.Verify(keys, signingContext, c.SignedMessage(), sig); err != nil {
		return fmt.Errorf("command %s: %w", c.ID, err)
	}
	return nil
}
