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

// A slave that answers at two bauds is at the one whose replies were
// clean, even where the garbled one had more replies in all; the others
// are kept for the fragment's comments.
func TestBestCleanBeatsGarbled(t *testing.T) {
	at := func(setting string, clean, garbled int) Bus {
		return Bus{URL: "rtu:///dev/ttyUSB0?baud=" + setting, Setting: setting, Slaves: []byte{1}, Clean: clean, Garbled: garbled}
	}
	for _, c := range []struct {
		settings []Bus
		want     string
	}{
		{[]Bus{at("9600", 6, 2), at("19200", 4, 0)}, "19200"},
		{[]Bus{at("9600", 4, 0), at("19200", 8, 1)}, "9600"},
		{[]Bus{at("9600", 2, 2), at("19200", 3, 1), at("4800", 1, 3)}, "19200"},
		{[]Bus{at("9600", 4, 0), at("19200", 4, 0)}, "9600"},
		{[]Bus{at("9600", 1, 0), at("19200", 4, 0)}, "19200"},
	} {
		b := Best(c.settings)
		if b.Setting != c.want || len(b.Others) != len(c.settings)-1 {
			t.Errorf("Best(%+v) = %s with %d others, want %s with %d", c.settings, b.Setting, len(b.Others), c.want, len(c.settings)-1)
		}
	}
	var w bytes.Buffer
	WriteFragment(&w, []Bus{Best([]Bus{at("9600", 2, 3), {URL: "rtu:///dev/ttyUSB0?baud=19200", Setting: "19200", Slaves: []byte{2}, Clean: 4}})})
	for _, want := range []string{`url: "rtu:///dev/ttyUSB0?baud=19200"`, "# at 9600: slaves 1 answered, 2 clean replies, 3 garbled", "a line that cannot work"} {
		if !bytes.Contains(w.Bytes(), []byte(want)) {
			t.Errorf("fragment lacks %q:\n%s", want, w.String())
		}
	}
}
