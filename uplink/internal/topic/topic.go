// Package topic parses and fills MQTT topic templates such as
// "fieldlink/{site}/{gateway}/{data_type}": the uplink's core checks the
// site's topics with it, and the MQTT kind renders each packet's.
package topic

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MQTT topic templates: "fieldlink/{site}/{gateway}/{data_type}" is parsed
// once, its gateway-wide {names} bound from the config's Vars in newMQTT, and
// the per-packet ones ({data_type}, {device}) rendered for each publish from
// the packet's own DataHead.

// Template is a parsed topic template: literals and {names}.
type Template struct{ parts []part }

type part struct{ lit, name string } // one of the two is set

// Parse parses a template; its errors quote it.
func Parse(s string) (Template, error) {
	var t Template
	if s == "" {
		return t, errors.New("empty")
	}
	if strings.ContainsAny(s, "+#\x00") {
		return t, fmt.Errorf("%q: '+', '#' and NUL are not allowed in a topic", s)
	}
	for rest := s; rest != ""; {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			t.parts = append(t.parts, part{lit: rest})
			break
		}
		if rest[i] == '}' {
			return t, fmt.Errorf("%q: '}' without '{'", s)
		}
		if i > 0 {
			t.parts = append(t.parts, part{lit: rest[:i]})
		}
		j := strings.IndexAny(rest[i+1:], "{}")
		if j < 0 || rest[i+1+j] == '{' {
			return t, fmt.Errorf("%q: '{' without '}'", s)
		}
		name := rest[i+1 : i+1+j]
		if name == "" {
			return t, fmt.Errorf("%q: empty {}", s)
		}
		t.parts = append(t.parts, part{name: name})
		rest = rest[i+1+j+1:]
	}
	return t, nil
}

// Bind fills in every {name} from vars but those named in perPacket, which
// are left to Render.
func (t Template) Bind(vars map[string]string, perPacket ...string) (Template, error) {
	var out Template
	add := func(lit string) {
		if k := len(out.parts) - 1; k >= 0 && out.parts[k].name == "" {
			out.parts[k].lit += lit
			return
		}
		out.parts = append(out.parts, part{lit: lit})
	}
	for _, p := range t.parts {
		switch {
		case p.name == "":
			add(p.lit)
		case slices.Contains(perPacket, p.name):
			out.parts = append(out.parts, p)
		default:
			v, err := value(p.name, vars[p.name], "vars")
			if err != nil {
				return out, err
			}
			add(v)
		}
	}
	return out, nil
}

// Render fills the template's remaining {names} from vars.
func (t Template) Render(vars map[string]string) (string, error) {
	if len(t.parts) == 1 && t.parts[0].name == "" {
		return t.parts[0].lit, nil
	}
	var buf [4]string
	vals := buf[:0]
	n := 0
	for _, p := range t.parts {
		v := p.lit
		if p.name != "" {
			var err error
			if v, err = value(p.name, vars[p.name], "the packet"); err != nil {
				return "", err
			}
		}
		vals = append(vals, v)
		n += len(v)
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, v := range vals {
		sb.WriteString(v)
	}
	return sb.String(), nil
}

func value(name, v, from string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("topic variable {%s} has no value in %s", name, from)
	}
	if strings.ContainsAny(v, "/+#\x00") {
		return "", fmt.Errorf("topic variable {%s} = %q: '/', '+', '#' and NUL are not allowed", name, v)
	}
	return v, nil
}

// Error is a topic that cannot be made for a packet: permanent, as
// retrying the packet cannot fix it.
type Error struct{ error }

// Wrap makes err a topic that cannot be made.
func Wrap(err error) Error { return Error{err} }

// Permanent reports that retrying the packet cannot fix the error.
func (Error) Permanent() bool { return true }

func (e Error) Unwrap() error { return e.error }

// Expand fills in a template's {names} from vars: every name must have a
// value.
func Expand(tmpl string, vars map[string]string) (string, error) {
	t, err := Parse(tmpl)
	if err == nil {
		t, err = t.Bind(vars)
	}
	if err != nil {
		return "", err
	}
	return t.Render(nil)
}
