package agent

import (
	"testing"

	"fieldlink/downlink"
)

// A command says what is known of it, and nothing for what is not: no
// "(unreadable command) ()" on the status page.
func TestCommandWords(t *testing.T) {
	for _, c := range []struct {
		r    downlink.Recent
		want string
	}{
		{downlink.Recent{Result: downlink.Result{ID: "cmd-42", Value: downlink.Value{}}, Point: "Open"}, "Open = " + downlink.Value{}.String() + " (cmd-42)"},
		{downlink.Recent{Result: downlink.Result{ID: "cmd-43"}}, "(cmd-43)"},
		{downlink.Recent{}, ""},
	} {
		if got := commandWords(c.r); got != c.want {
			t.Errorf("commandWords(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
}
