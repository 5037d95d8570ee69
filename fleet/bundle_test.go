package fleet

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/signing"
)

var b0 = time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)

func keypair(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// A bundle opens only with a trusted key, for this gateway, within its
// validity, with the site file it was signed with.
func TestOpenBundle(t *testing.T) {
	pub, priv := keypair(t)
	otherPub, other := keypair(t)
	site := []byte("site: {id: \"001\"}\n")
	m := Manifest{Serial: 7, Gateways: []string{"gw-01", "gw-02"}, NotBefore: b0, Expires: b0.Add(time.Hour)}
	good, err := Sign(site, m, priv)
	if err != nil {
		t.Fatal(err)
	}
	got, s, err := Open(good, []ed25519.PublicKey{otherPub, pub}, "gw-02", b0.Add(time.Minute))
	if err != nil || got.Serial != 7 || string(s) != string(site) {
		t.Fatalf("Open: %+v %q %v", got, s, err)
	}
	byOther, _ := Sign(site, m, other)
	everyGateway, _ := Sign(site, Manifest{Serial: 8, NotBefore: b0, Expires: b0.Add(time.Hour)}, priv)
	if _, _, err := Open(everyGateway, []ed25519.PublicKey{pub}, "gw-99", b0); err != nil {
		t.Errorf("a bundle for every gateway: %v", err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		gw   string
		at   time.Time
		want error
	}{
		{"signed by another key", byOther, "gw-01", b0, ErrSignature},
		{"site file altered", []byte(strings.Replace(string(good), `001`, `002`, 1)), "gw-01", b0, ErrDigest},
		{"manifest altered", []byte(strings.Replace(string(good), `"serial":7`, `"serial":9`, 1)), "gw-01", b0, ErrSignature},
		{"another gateway's", good, "gw-03", b0, ErrOtherGateway},
		{"not valid yet", good, "gw-01", b0.Add(-time.Second), ErrNotYet},
		{"expired", good, "gw-01", b0.Add(time.Hour), ErrExpired},
		{"not a bundle", []byte("site: {}\n"), "gw-01", b0, ErrMalformed},
		{"too large", make([]byte, MaxBundleSize+1), "gw-01", b0, ErrMalformed},
	} {
		if _, _, err := Open(tc.data, []ed25519.PublicKey{pub}, tc.gw, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if !strings.Contains(string(good), `"serial":7`) {
		t.Fatalf("the bundle does not carry its manifest as signed: %s", good)
	}
	// A signature made for a command never verifies as a bundle's.
	env := strings.Replace(string(good), "signature", "x", 1)
	if _, _, err := Open([]byte(env), []ed25519.PublicKey{pub}, "gw-01", b0); err == nil {
		t.Error("a bundle with an unknown member opened")
	}
	sig := signing.Sign(priv, "fieldlink command v1", []byte("anything"))
	if signing.Verify([]ed25519.PublicKey{pub}, SigningContext, []byte("anything"), sig) == nil {
		t.Error("a command signature verified under the bundle context")
	}
}
