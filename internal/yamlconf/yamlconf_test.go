package yamlconf

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

type color int

func (c *color) UnmarshalText(b []byte) error {
	switch string(b) {
	case "red":
		*c = 1
	case "blue":
		*c = 2
	default:
		return fmt.Errorf("unknown color %q (valid: red, blue)", b)
	}
	return nil
}

type inner struct {
	N     int           `yaml:"n,required"`
	U     uint8         `yaml:"u"`
	F     float64       `yaml:"f"`
	D     time.Duration `yaml:"d"`
	B     bool          `yaml:"b"`
	Color color         `yaml:"color"`
	P     *float64      `yaml:"p"`
}

type outer struct {
	Name  string           `yaml:"name"`
	Items []inner          `yaml:"items"`
	Tags  map[string]inner `yaml:"tags"`
}

func TestDecodeGood(t *testing.T) {
	var o outer
	doc, err := Decode("f.yaml", []byte("name: x\nitems:\n  - {n: 1, u: 255, f: 2, d: 1.5s, b: true, color: blue, p: 0.5}\ntags:\n  a: {n: 3}\n"), &o)
	if err != nil {
		t.Fatal(err)
	}
	it := o.Items[0]
	if o.Name != "x" || it.N != 1 || it.U != 255 || it.F != 2 || it.D != 1500*time.Millisecond || !it.B || it.Color != 2 || *it.P != 0.5 || o.Tags["a"].N != 3 {
		t.Fatalf("got %+v", o)
	}
	if line, _ := doc.Line("items[0].color"); line != 3 {
		t.Fatalf("items[0].color at line %d, want 3", line)
	}
	if line, _ := doc.Line("items[0].missing.deeper"); line != 3 {
		t.Fatalf("unknown paths fall back to their parent: got line %d", line)
	}
	if !doc.Has("tags.a.n") || doc.Has("items[0].u.x") {
		t.Fatal("Has")
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"nme: x", `f.yaml:1:1: nme: unknown field "nme" (did you mean "name"?) (valid: name, items, tags)`},
		{"items: [{n: x}]", `f.yaml:1:13: items[0].n: expected a whole number, got "x"`},
		{"items: [{n: 1, u: 256}]", `f.yaml:1:19: items[0].u: 256 is out of range for this field (valid: 0..255)`},
		{"items: [{n: 1, u: -1}]", `items[0].u: expected a whole number ≥ 0, got "-1"`},
		{"items: [{u: 1}]", `f.yaml:1:9: items[0].n: missing required field "n"`},
		{"items: [{n: 1, f: abc}]", `items[0].f: expected a number, got "abc"`},
		{"items: [{n: 1, b: yes please}]", `items[0].b: expected true or false`},
		{"items: [{n: 1, color: green}]", `f.yaml:1:23: items[0].color: unknown color "green" (valid: red, blue)`},
		{"items: [{n: 1, d: 5}]", `items[0].d: expected a duration such as 500ms or 5s, got "5"`},
		{"items: {n: 1}", `f.yaml:1:8: items: expected a list, got a mapping`},
		{"name: x\nname: y", `f.yaml:2:1: name: duplicate key "name" (a key may appear once; the first is on line 1)`},
		{"name: [x]", `name: expected a string, got a list`},
		{"name: x\n  bad: indent", `f.yaml:2:1: invalid YAML: mapping values are not allowed`},
		{"", `f.yaml: file is empty (expected key: value lines)`},
		{"tags: {a: {n: 1}, a: {n: 2}}", `f.yaml:1:19: tags.a: duplicate key "a" (a key may appear once; the first is on line 1)`},
		{"- a\n- b", `f.yaml:1:1: expected a mapping (key: value lines), got a list`},
	} {
		var o outer
		_, err := Decode("f.yaml", []byte(tc.src), &o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %v\n want %s", tc.src, err, tc.want)
		}
	}
}

func TestDecodeReportsEveryError(t *testing.T) {
	var o outer
	_, err := Decode("f.yaml", []byte("items:\n  - {n: x}\n  - {n: 1, zz: 2}\nbogus: 1\n"), &o)
	es, ok := IsErrors(err)
	if !ok || len(es) != 3 {
		t.Fatalf("want 3 errors, got %v", err)
	}
	if es[0].Line != 2 || es[1].Line != 3 || es[2].Line != 4 {
		t.Fatalf("lines %d %d %d", es[0].Line, es[1].Line, es[2].Line)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("name: x\nitems: [{n: 1, color: red}]")
	f.Add("tags: {a: {n: 1}}")
	f.Fuzz(func(t *testing.T, src string) {
		var o outer
		doc, err := Decode("f.yaml", []byte(src), &o)
		if doc == nil {
			t.Fatal("nil doc")
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}
