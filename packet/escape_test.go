package packet

import (
	"bytes"
	"encoding/json"
	"testing"
)

// stdlibString is s as encoding/json writes it with HTML escaping off.
func stdlibString(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

var escapeCases = []string{
	"", "plain", `"`, `\`, "/", "<>&'", "\x00\x01\x07\x08\x09\x0a\x0b\x0c\x0d\x1b\x1f\x20\x7f",
	"é", "温度", "\U0001F327", "\u2028\u2029", "\u00a0\ufeff\ufffd",
	"\xff", "\xe6\xb8", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\x80", "a\xffb\xfe",
}

func TestAppendStringMatchesStdlib(t *testing.T) {
	for _, s := range escapeCases {
		if got, want := appendString(nil, s), stdlibString(t, s); !bytes.Equal(got, want) {
			t.Errorf("appendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	}
	for c := 0; c < 256; c++ {
		s := string([]byte{'a', byte(c), 'z'})
		if got, want := appendString(nil, s), stdlibString(t, s); !bytes.Equal(got, want) {
			t.Errorf("appendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	}
}

// FuzzAppendString checks the escaping byte for byte against encoding/json
// with HTML escaping off.
func FuzzAppendString(f *testing.F) {
	for _, s := range escapeCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := appendString([]byte("x"), s), append([]byte("x"), stdlibString(t, s)...); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	})
}
