//go:build field

package main

import (
	"strings"
	"testing"
)

// The commands the field build leaves out keep their names there and say
// where to run them instead (make test-field runs this).
func TestUsageAndVersionFieldLeavesOut(t *testing.T) {
	for _, name := range []string{"demo", "lab", "emulate", "delphi"} {
		code, _, errOut := gw(t, name, "-h")
		if code != 1 || !strings.Contains(errOut, "not in this build") || !strings.Contains(errOut, "go run ./cmd/gateway "+name) {
			t.Errorf("%s in the field build: exit %d, %q; want 1, saying to run it with go run ./cmd/gateway %s", name, code, errOut, name)
		}
	}
}

// The field build's usage lists only what it runs.
func TestUsageFieldListsWhatItRuns(t *testing.T) {
	var b strings.Builder
	usage(&b)
	for _, name := range []string{"demo", "lab", "emulate", "delphi"} {
		if strings.Contains(b.String(), "gateway "+name+" ") {
			t.Errorf("the field build's usage lists %s, which it does not run:\n%s", name, b.String())
		}
	}
}
