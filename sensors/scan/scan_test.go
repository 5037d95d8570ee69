package scan

import (
	"bytes"
	"slices"
	"testing"

	"fieldlink/sensors"
)

func TestParseIDs(t *testing.T) {
	ids, err := ParseIDs("1-3, 32,247")
	if err != nil || !slices.Equal(ids, []byte{1, 2, 3, 32, 247}) {
		t.Errorf("ParseIDs: %v, %v", ids, err)
	}
	for _, bad := range []string{"0", "248", "3-1", "a", "1-", ""} {
		if _, err := ParseIDs(bad); err == nil {
			t.Errorf("ParseIDs(%q) took it", bad)
		}
	}
}

// A slave that matched no profile is a comment; a bus with none listed
// is an empty list, so that the fragment still parses.
func TestWriteFragmentUnmatched(t *testing.T) {
	var b bytes.Buffer
	WriteFragment(&b, []Bus{{URL: "tcp://127.0.0.1:1502", Slaves: []byte{7}, IDs: make([]sensors.Identity, 1)}})
	for _, want := range []string{"  - name: bus-1\n    url: \"tcp://127.0.0.1:1502\"\n", "# slave 7: no profile's registers answer", "      []\n"} {
		if !bytes.Contains(b.Bytes(), []byte(want)) {
			t.Errorf("fragment lacks %q:\n%s", want, b.String())
		}
	}
}
