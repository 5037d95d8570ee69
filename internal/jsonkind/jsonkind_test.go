package jsonkind

import "testing"

func TestOf(t *testing.T) {
	for raw, want := range map[string]string{
		``: "nothing", `"x"`: "a string", `{}`: "an object", `[1]`: "an array",
		`true`: "a boolean", `false`: "a boolean", `null`: "null", `-1.5`: "a number",
	} {
		if got := Of([]byte(raw)); got != want {
			t.Errorf("Of(%q) = %q, want %q", raw, got, want)
		}
	}
}
