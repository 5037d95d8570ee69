package journal

import (
	"bytes"
	"errors"
	"testing"
)

func TestChooseFormat(t *testing.T) {
	var b bytes.Buffer
	t.Setenv("JOURNAL_STREAM", "")
	for _, tc := range []struct{ env, invocation, format, want string }{
		{"", "", "auto", "text"},
		{"", "x", "auto", "json"},
		{"json", "", "auto", "json"},
		{"auto", "", "auto", "text"},
		{"json", "x", "text", "text"},
	} {
		t.Setenv(FormatEnv, tc.env)
		t.Setenv("INVOCATION_ID", tc.invocation)
		got, fromEnv := ChooseFormat(&b, tc.format)
		if got != tc.want || fromEnv != (tc.format == "auto" && tc.env != "" && tc.env != "auto") {
			t.Errorf("%s=%q INVOCATION_ID=%q %s: %s, %v", FormatEnv, tc.env, tc.invocation, tc.format, got, fromEnv)
		}
	}
	if _, err := NewLogger(&b, "xml", Socket, "test", nil); !errors.Is(err, ErrFormat) {
		t.Errorf("NewLogger(xml): %v", err)
	}
}
