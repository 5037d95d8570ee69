package signing

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretText returns the forms of priv's seed that must never show in an
// error: its base64 and a stretch of it.
func secretText(priv ed25519.PrivateKey) []string {
	b64 := base64.StdEncoding.EncodeToString(priv.Seed())
	return []string{b64, b64[8:24]}
}

func noSecret(t *testing.T, err error, priv ed25519.PrivateKey) {
	t.Helper()
	for _, s := range secretText(priv) {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("the error shows the private key: %v", err)
		}
	}
}

func TestGenerateFilesAndLoad(t *testing.T) {
	name := filepath.Join(t.TempDir(), "ops")
	pub, err := GenerateFiles(name)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(name + ".key")
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 || perm&0o600 != 0o600 {
		t.Fatalf("private key file mode %04o, want 0600", perm)
	}
	priv, err := LoadPrivate(name + ".key")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadPublic(name + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Equal(pub) || !priv.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatal("the loaded keys are not the pair written")
	}
	sig := Sign(priv, "test v1", []byte("msg"))
	if err := Verify([]ed25519.PublicKey{loaded}, "test v1", []byte("msg"), sig); err != nil {
		t.Fatal(err)
	}
	// The files are the documented one-liners.
	for path, tag := range map[string]string{name + ".key": "fieldlink-ed25519-private ", name + ".pub": "fieldlink-ed25519-public "} {
		data, _ := os.ReadFile(path)
		if !strings.HasPrefix(string(data), tag) || strings.Count(string(data), "\n") != 1 {
			t.Fatalf("%s: %q", path, data)
		}
	}

	// Never overwritten: the pair stays as it was.
	before, _ := os.ReadFile(name + ".key")
	if _, err := GenerateFiles(name); err == nil || !strings.Contains(err.Error(), name+".key") {
		t.Fatalf("GenerateFiles over an existing pair: %v", err)
	}
	if after, _ := os.ReadFile(name + ".key"); !bytes.Equal(before, after) {
		t.Fatal("GenerateFiles overwrote a private key")
	}
	// A lone .pub is not overwritten either, and no .key appears beside it.
	lone := filepath.Join(t.TempDir(), "lone")
	if err := os.WriteFile(lone+".pub", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateFiles(lone); err == nil || !strings.Contains(err.Error(), lone+".pub") {
		t.Fatalf("GenerateFiles over a .pub: %v", err)
	}
	if _, err := os.Stat(lone + ".key"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a .key was written beside a refused .pub: %v", err)
	}
}

func TestLoadPrivateRefusesOpenModes(t *testing.T) {
	name := filepath.Join(t.TempDir(), "k")
	if _, err := GenerateFiles(name); err != nil {
		t.Fatal(err)
	}
	priv, err := LoadPrivate(name + ".key")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o644} {
		if err := os.Chmod(name+".key", mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPrivate(name + ".key")
		if err == nil || !strings.Contains(err.Error(), name+".key") || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("mode %04o: %v", mode, err)
		}
		noSecret(t, err, priv)
	}
	// A public key file given as the private key is named for what it is,
	// whatever its mode.
	if _, err := LoadPrivate(name + ".pub"); err == nil || !strings.Contains(err.Error(), "is a public key file") {
		t.Fatalf("a .pub as the private key: %v", err)
	}
	if err := os.Chmod(name+".key", 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivate(name + ".key"); err != nil {
		t.Fatalf("mode 0400: %v", err)
	}
}

func TestKeyFileFormat(t *testing.T) {
	_, priv, _ := Generate()
	seed := base64.StdEncoding.EncodeToString(priv.Seed())
	pub := base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// Accepted: comments, blank lines, CRLF, no final newline.
	for name, content := range map[string]string{
		"plain":    "fieldlink-ed25519-private " + seed + "\n",
		"comments": "# site 001 operators\n\n  fieldlink-ed25519-private " + seed + "  \r\n# end\n",
		"no-eol":   "fieldlink-ed25519-private " + seed,
	} {
		k, err := LoadPrivate(write(name, content))
		if err != nil || !k.Equal(priv) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if k, err := LoadPublic(write("pub", "# ops\nfieldlink-ed25519-public "+pub+"\n")); err != nil || !k.Equal(priv.Public()) {
		t.Errorf("public with a comment: %v", err)
	}
	// Refused, with the file (and line) named and the key never shown.
	for name, c := range map[string]struct{ content, want string }{
		"empty":       {"", "no private key line"},
		"comments":    {"# nothing\n", "no private key line"},
		"two":         {"fieldlink-ed25519-private " + seed + "\nfieldlink-ed25519-private " + seed + "\n", ":2: a second key"},
		"short":       {"fieldlink-ed25519-private " + seed[:20] + "\n", ":1: the key is not 32 bytes"},
		"not-base64":  {"fieldlink-ed25519-private " + seed[:40] + "!!!!\n", ":1: the key is not 32 bytes"},
		"openssh":     {"-----BEGIN OPENSSH PRIVATE KEY-----\n" + seed + "\n", ":1: not a fieldlink private key"},
		"public-file": {"fieldlink-ed25519-public " + pub + "\n", "is a public key file"},
	} {
		path := write(name, c.content)
		_, err := LoadPrivate(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q naming the file", name, err, c.want)
			continue
		}
		noSecret(t, err, priv)
	}
	path := write("given-as-pub", "fieldlink-ed25519-private "+seed+"\n")
	_, err := LoadPublic(path)
	if err == nil || !strings.Contains(err.Error(), "is a private key file") || !strings.Contains(err.Error(), path) {
		t.Errorf("a private key given as public: %v", err)
	} else {
		noSecret(t, err, priv)
	}
	if _, err := LoadPublic(filepath.Join(dir, "missing.pub")); err == nil || !strings.Contains(err.Error(), "missing.pub") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LoadPublic(write("huge", strings.Repeat("#\n", maxKeyFile))); err == nil || !strings.Contains(err.Error(), "huge") {
		t.Errorf("huge file: %v", err)
	}
}

func TestLoadPublicKeys(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	var want []ed25519.PublicKey
	for _, n := range []string{"a", "b", "c"} {
		pub, err := GenerateFiles(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		paths, want = append(paths, filepath.Join(dir, n+".pub")), append(want, pub)
	}
	keys, err := LoadPublicKeys(paths)
	if err != nil || len(keys) != 3 {
		t.Fatalf("%d keys, %v", len(keys), err)
	}
	for i := range keys {
		if !keys[i].Equal(want[i]) {
			t.Fatalf("key %d is not %s", i, paths[i])
		}
	}
	bad := append(paths[:1:1], filepath.Join(dir, "b.key"))
	if _, err := LoadPublicKeys(bad); err == nil || !strings.Contains(err.Error(), "b.key") {
		t.Fatalf("a .key among the public keys: %v", err)
	}
}

func TestSignVerify(t *testing.T) {
	pubA, privA, _ := Generate()
	pubB, _, _ := Generate()
	msg := []byte("valve-1 Setpoint 42.5")
	sig := Sign(privA, "fieldlink command v1", msg)
	if err := Verify([]ed25519.PublicKey{pubB, pubA}, "fieldlink command v1", msg, sig); err != nil {
		t.Fatalf("with the second of two keys: %v", err)
	}
	for name, err := range map[string]error{
		"other key":       Verify([]ed25519.PublicKey{pubB}, "fieldlink command v1", msg, sig),
		"other context":   Verify([]ed25519.PublicKey{pubA}, "fieldlink config v1", msg, sig),
		"other message":   Verify([]ed25519.PublicKey{pubA}, "fieldlink command v1", append(msg, ' '), sig),
		"no keys":         Verify(nil, "fieldlink command v1", msg, sig),
		"short signature": Verify([]ed25519.PublicKey{pubA}, "fieldlink command v1", msg, sig[:63]),
		"bad key":         Verify([]ed25519.PublicKey{pubA[:31]}, "fieldlink command v1", msg, sig),
		// The zero byte keeps context and message apart.
		"shifted boundary": Verify([]ed25519.PublicKey{pubA}, "fieldlink command v", append([]byte("1"), msg...), sig),
	} {
		if !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	// A plain Ed25519 signature over context, zero byte, message, as a
	// signer without this package makes it.
	plain := ed25519.Sign(privA, append([]byte("fieldlink command v1\x00"), msg...))
	if err := Verify([]ed25519.PublicKey{pubA}, "fieldlink command v1", msg, plain); err != nil {
		t.Fatalf("a signature made as documented: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a context with a zero byte was taken")
		}
	}()
	Sign(privA, "a\x00b", msg)
}

func TestKeyID(t *testing.T) {
	a, _, _ := Generate()
	b, _, _ := Generate()
	if KeyID(a) != KeyID(append(ed25519.PublicKey(nil), a...)) || KeyID(a) == KeyID(b) || len(KeyID(a)) != 16 {
		t.Fatalf("KeyID: %s %s", KeyID(a), KeyID(b))
	}
}
