// Package fleet is the gateway's side of running many gateways: it pulls
// signed site files (bundles) from the fleet's configuration server,
// applies them through the same reload as SIGHUP, watches each on
// probation and reverts to the last known-good file when it breaks the
// gateway, and reports what it did.
//
// The gateway pulls; nothing is ever pushed to it. It always starts from
// its last known-good configuration and never waits for the server.
package fleet

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"fieldlink/internal/signing"
)

// SigningContext is the use a bundle signature is made for: a command's
// signature never verifies as a bundle's, nor the other way round.
const SigningContext = "fieldlink config v1"

// MaxBundleSize bounds a bundle: a site file and its manifest.
const MaxBundleSize = 1 << 20

// Manifest says what a bundle is and for whom. It is signed as the exact
// bytes sent, so nothing is canonicalised.
type Manifest struct {
	// Serial orders the fleet's bundles for a gateway: only one above the
	// current serial is applied, and a reverted serial never again.
	Serial uint64 `json:"serial"`
	// Gateways the bundle is for, by gateway id; empty: every gateway.
	Gateways []string `json:"gateways,omitempty"`
	// SHA256 of the site file, hex.
	SHA256    string    `json:"sha256"`
	NotBefore time.Time `json:"not_before"`
	Expires   time.Time `json:"expires"`
}

// envelope is a bundle on the wire: one JSON document.
//
//	{"manifest":{…},"signature":"base64","site":"the site file's text"}
type envelope struct {
	Manifest  json.RawMessage `json:"manifest"`
	Signature string          `json:"signature"`
	Site      string          `json:"site"`
}

// Sign makes a bundle of a site file: m's SHA256 is filled in.
func Sign(site []byte, m Manifest, key ed25519.PrivateKey) ([]byte, error) {
	sum := sha256.Sum256(site)
	m.SHA256 = hex.EncodeToString(sum[:])
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	sig := signing.Sign(key, SigningContext, raw)
	// Not indented: the manifest must travel as the bytes signed.
	out, err := json.Marshal(envelope{Manifest: raw, Signature: base64.StdEncoding.EncodeToString(sig), Site: string(site)})
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// Errors of Open, for a reason that says which check failed.
var (
	ErrMalformed    = errors.New("not a bundle")
	ErrSignature    = errors.New("bad signature")
	ErrOtherGateway = errors.New("for other gateways")
	ErrNotYet       = errors.New("not valid yet")
	ErrExpired      = errors.New("expired")
	ErrDigest       = errors.New("site file does not match the manifest's sha256")
)

// Open checks a bundle — size, signature by one of keys, the gateway it is
// for, its validity at now, the site file's digest — and returns its
// manifest and site file.
func Open(data []byte, keys []ed25519.PublicKey, gateway string, now time.Time) (Manifest, []byte, error) {
	var m Manifest
	if len(data) > MaxBundleSize {
		return m, nil, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(data), MaxBundleSize)
	}
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil || len(env.Manifest) == 0 {
		return m, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signature)
	if err != nil {
		return m, nil, fmt.Errorf("%w: signature is not base64", ErrSignature)
	}
	if err := signing.Verify(keys, SigningContext, env.Manifest, sig); err != nil {
		return m, nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	md := json.NewDecoder(bytes.NewReader(env.Manifest))
	md.DisallowUnknownFields()
	if err := md.Decode(&m); err != nil {
		return m, nil, fmt.Errorf("%w: manifest: %v", ErrMalformed, err)
	}
	site := []byte(env.Site)
	sum := sha256.Sum256(site)
	switch {
	case m.SHA256 != hex.EncodeToString(sum[:]):
		return m, nil, ErrDigest
	case len(m.Gateways) > 0 && !slices.Contains(m.Gateways, gateway):
		return m, nil, fmt.Errorf("%w (%v), not %s", ErrOtherGateway, m.Gateways, gateway)
	case now.Before(m.NotBefore):
		return m, nil, fmt.Errorf("%w: from %s", ErrNotYet, m.NotBefore.Format(time.RFC3339))
	case !m.Expires.IsZero() && !now.Before(m.Expires):
		return m, nil, fmt.Errorf("%w at %s", ErrExpired, m.Expires.Format(time.RFC3339))
	}
	return m, site, nil
}
