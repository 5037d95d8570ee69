package downlink

import (
	"crypto/ed25519"
	"errors"
	"testing"

	"fieldlink/internal/signing"
)

// fuzzKey signs in FuzzParseCommand: fixed, so that runs repeat.
var fuzzKey = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))

// FuzzParseCommand checks that ParseCommand never panics; that a command
// it reads re-encodes to JSON it reads back to the same command; and that
// the command, signed, verifies through its JSON while a change of one
// byte in any signed field (flipped, inserted or, for a one-byte field,
// dropped) does not.
func FuzzParseCommand(f *testing.F) {
	f.Add([]byte(fullCommand))
	f.Add([]byte(`{"id":"a","device":"d","point":"p","value":true,"issued_at":"2026-03-01T10:00:00Z"}`))
	f.Add([]byte(`{"id":"x.y:z_1","device":"pump 2 <north>","point":"温度","value":-0,"issued_at":"2026-03-01T10:00:00.123456789-11:30","actor":null,"signature":null}`))
	f.Add([]byte(`{"id":"a","device":"d","point":"p","value":1E+2,"issued_at":"2026-03-01T10:00:00Z","id":"b"}`))
	f.Add([]byte(`{"id":"a","device":"d\u2028","point":"p\"q\\","value":0.5,"issued_at":"2026-03-01T10:00:00Z"}`))
	f.Add([]byte(`[{"id":"a"}]`))
	pub := fuzzKey.Public().(ed25519.PublicKey)
	keys := []ed25519.PublicKey{pub}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCommand(data)
		if err != nil {
			if c != (Command{}) {
				t.Fatalf("a refused command came back with fields: %+v", c)
			}
			return
		}
		out := c.JSON()
		back, err := ParseCommand(out)
		if err != nil {
			t.Fatalf("%s re-encodes to %s, which does not parse: %v", data, out, err)
		}
		if back != c {
			t.Fatalf("%s re-encodes to %s, which reads back as %+v, not %+v", data, out, back, c)
		}
		if again := back.JSON(); string(again) != string(out) {
			t.Fatalf("re-encoding is not stable: %s then %s", out, again)
		}

		s := Sign(c, fuzzKey)
		sb, err := ParseCommand(s.JSON())
		if err != nil || sb != s {
			t.Fatalf("signed %s: read back %+v, %v", s.JSON(), sb, err)
		}
		if err := sb.Verify(keys); err != nil {
			t.Fatalf("signed %s does not verify: %v", s.JSON(), err)
		}
		at := len(data)
		for i := range 7 {
			for _, change := range []func(string) string{
				func(v string) string { // flip a bit of one byte
					if v == "" {
						return "x"
					}
					j := at % len(v)
					return v[:j] + string(v[j]^1) + v[j+1:]
				},
				func(v string) string { // insert one byte
					j := at % (len(v) + 1)
					return v[:j] + "0" + v[j:]
				},
				func(v string) string { // drop one byte
					if v == "" {
						return "0"
					}
					j := at % len(v)
					return v[:j] + v[j+1:]
				},
			} {
				m := s
				switch i {
				case 0:
					m.ID = change(m.ID)
				case 1:
					m.Device = change(m.Device)
				case 2:
					m.Point = change(m.Point)
				case 3:
					m.Value.text = change(m.Value.text)
				case 4:
					m.IssuedAt.text = change(m.IssuedAt.text)
				case 5:
					m.ExpiresAt.text = change(m.ExpiresAt.text)
				case 6:
					m.Actor = change(m.Actor)
				}
				if err := m.Verify(keys); !errors.Is(err, signing.ErrBadSignature) {
					t.Fatalf("field %d changed (%+v): Verify = %v, want ErrBadSignature", i, m, err)
				}
			}
		}
	})
}
