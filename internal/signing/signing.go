// Package signing holds the gateway's Ed25519 keys: key files, and
// signatures bound to one use by a context string, so that a signature made
// for one use (a downlink command, say) never verifies for another (a
// remote configuration).
//
// # Key files
//
// A key file is text: one line "fieldlink-ed25519-private <base64>" (the
// 32-byte seed) or "fieldlink-ed25519-public <base64>" (the 32-byte public
// key), standard base64 with padding. Blank lines and lines starting with
// "#" are ignored. A private key file must not be open to group or others
// (mode 0600): LoadPrivate refuses it.
//
// # Signatures
//
// Sign and Verify use plain Ed25519 (RFC 8032, as every library has it)
// over the context, a zero byte, and the message: a signer elsewhere (the
// platform) builds the same bytes without needing Ed25519ctx.
//
// Errors name the file; none ever holds key material.
package signing

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Tags that open the key line of a key file.
const (
	privateTag = "fieldlink-ed25519-private"
	publicTag  = "fieldlink-ed25519-public"
)

// Suffixes of the files GenerateFiles writes.
const (
	PrivateSuffix = ".key"
	PublicSuffix  = ".pub"
)

// maxKeyFile bounds what a key file may hold: a line and some comments.
const maxKeyFile = 64 << 10

// ErrBadSignature says that a signature verifies with none of the keys.
var ErrBadSignature = errors.New("signature does not verify")

// Generate returns a new key pair from crypto/rand.
func Generate() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// GenerateFiles writes a new key pair as name+".key" (mode 0600) and
// name+".pub", and returns the public key. It overwrites neither: if one of
// them exists, it writes nothing.
func GenerateFiles(name string) (ed25519.PublicKey, error) {
	keyPath, pubPath := name+PrivateSuffix, name+PublicSuffix
	for _, p := range []string{keyPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("signing: %s exists: not overwriting a key", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("signing: %w", err)
		}
	}
	pub, priv, err := Generate()
	if err != nil {
		return nil, fmt.Errorf("signing: generate: %w", err)
	}
	if err := writeNew(keyPath, 0o600, privateTag, priv.Seed()); err != nil {
		return nil, err
	}
	if err := writeNew(pubPath, 0o644, publicTag, pub); err != nil {
		_ = os.Remove(keyPath) // ours, written a moment ago: no half pair
		return nil, err
	}
	return pub, nil
}

// writeNew creates path (never overwriting it) with the key line tag and
// key, and syncs it.
func writeNew(path string, mode os.FileMode, tag string, key []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("signing: %w", err) // *PathError: names the file
	}
	_, err = fmt.Fprintf(f, "%s %s\n", tag, base64.StdEncoding.EncodeToString(key))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("signing: write %s: %w", path, err)
	}
	return nil
}

// LoadPrivate reads a private key file. It refuses one that group or
// others may open.
func LoadPrivate(path string) (ed25519.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("signing: private key %s is not a regular file", path)
	}
	seed, err := readKey(f, path, privateTag)
	if err != nil {
		return nil, err // not a private key file: its mode is no matter (a .pub given by mistake)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("signing: private key %s is open to group or others (mode %04o): chmod 600 %s", path, perm, path)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// LoadPublic reads a public key file.
func LoadPublic(path string) (ed25519.PublicKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	defer f.Close()
	key, err := readKey(f, path, publicTag)
	if err != nil {
		return nil, err
	}
	return ed25519.PublicKey(key), nil
}

// LoadPublicKeys reads the public key files paths, in order.
func LoadPublicKeys(paths []string) ([]ed25519.PublicKey, error) {
	keys := make([]ed25519.PublicKey, 0, len(paths))
	for _, p := range paths {
		k, err := LoadPublic(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// readKey returns the 32 bytes of the key line tagged want in r, the file
// at path. Its errors quote nothing of the file: it may hold a secret.
func readKey(r io.Reader, path, want string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("signing: read %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("signing: %s: over %d bytes: not a key file", path, maxKeyFile)
	}
	kind := "public"
	if want == privateTag {
		kind = "private"
	}
	var key []byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxKeyFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tag, b64, _ := strings.Cut(line, " ")
		switch {
		case tag == privateTag && want == publicTag:
			return nil, fmt.Errorf("signing: %s is a private key file; give the public key (%s)", path, PublicSuffix)
		case tag == publicTag && want == privateTag:
			return nil, fmt.Errorf("signing: %s is a public key file; give the private key (%s)", path, PrivateSuffix)
		case tag != want:
			return nil, fmt.Errorf("signing: %s:%d: not a fieldlink %s key: want %q and base64", path, n, kind, want)
		case key != nil:
			return nil, fmt.Errorf("signing: %s:%d: a second key; want one per file", path, n)
		}
		k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil || len(k) != 32 {
			return nil, fmt.Errorf("signing: %s:%d: the key is not 32 bytes of base64", path, n)
		}
		key = k
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("signing: read %s: %w", path, err)
	}
	if key == nil {
		return nil, fmt.Errorf("signing: %s: no %s key line (%q and base64)", path, kind, want)
	}
	return key, nil
}

// Sign signs msg for the use named by context.
func Sign(key ed25519.PrivateKey, context string, msg []byte) []byte {
	return ed25519.Sign(key, message(context, msg))
}

// Verify reports whether sig is a signature of msg for the use named by
// context by one of keys; if not, its error wraps ErrBadSignature. With no
// keys nothing verifies.
func Verify(keys []ed25519.PublicKey, context string, msg, sig []byte) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no public keys to verify with", ErrBadSignature)
	}
	if len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadSignature, len(sig), ed25519.SignatureSize)
	}
	m := message(context, msg)
	for _, k := range keys {
		if len(k) == ed25519.PublicKeySize && ed25519.Verify(k, m, sig) {
			return nil
		}
	}
	return fmt.Errorf("%w with any of the %d public keys", ErrBadSignature, len(keys))
}

// message is what is signed: context, a zero byte, msg. The context is a
// constant of the code that signs; one holding a zero byte would make two
// uses ambiguous.
func message(context string, msg []byte) []byte {
	if context == "" || strings.IndexByte(context, 0) >= 0 {
		panic("signing: context must be non-empty and free of zero bytes")
	}
	m := make([]byte, 0, len(context)+1+len(msg))
	m = append(m, context...)
	m = append(m, 0)
	return append(m, msg...)
}

// KeyID returns a short name of a public key for logs and listings: the
// first 8 bytes of its SHA-256, in hex.
func KeyID(key ed25519.PublicKey) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}
