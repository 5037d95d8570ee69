package uplink

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MQTT topic templates: "fieldlink/{site}/{gateway}/{data_type}" is parsed
// once, its gateway-wide {names} bound from the config's Vars in newMQTT, and
// the per-packet ones ({data_type}, {device}) rendered for each publish from
// the packet's own DataHead.

// mqttTemplate is a parsed topic template: literals and {names}.
type mqttTemplate struct{ parts []mqttPart }

type mqttPart struct{ lit, name string } // one of the two is set

func mqttParseTemplate(s string) (mqttTemplate, error) {
	var t mqttTemplate
	if s == "" {
		return t, errors.New("empty")
	}
	if strings.ContainsAny(s, "+#\x00") {
		return t, fmt.Errorf("%q: '+', '#' and NUL are not allowed in a topic", s)
	}
	for rest := s; rest != ""; {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			t.parts = append(t.parts, mqttPart{lit: rest})
			break
		}
		if rest[i] == '}' {
			return t, fmt.Errorf("%q: '}' without '{'", s)
		}
		if i > 0 {
			t.parts = append(t.parts, mqttPart{lit: rest[:i]})
		}
		j := strings.IndexAny(rest[i+1:], "{}")
		if j < 0 || rest[i+1+j] == '{' {
			return t, fmt.Errorf("%q: '{' without '}'", s)
		}
		name := rest[i+1 : i+1+j]
		if name == "" {
			return t, fmt.Errorf("%q: empty {}", s)
		}
		t.parts = append(t.parts, mqttPart{name: name})
		rest = rest[i+1+j+1:]
	}
	return t, nil
}

// bind fills in every {name} from vars but those named in perPacket, which
// are left to render.
func (t mqttTemplate) bind(vars map[string]string, perPacket ...string) (mqttTemplate, error) {
	var out mqttTemplate
	add := func(lit string) {
		if k := len(out.parts) - 1; k >= 0 && out.parts[k].name == "" {
			out.parts[k].lit += lit
			return
		}
		out.parts = append(out.parts, mqttPart{lit: lit})
	}
	for _, p := range t.parts {
		switch {
		case p.name == "":
			add(p.lit)
		case slices.Contains(perPacket, p.name):
			out.parts = append(out.parts, p)
		default:
			v, err := mqttTopicValue(p.name, vars[p.name], "vars")
			if err != nil {
				return out, err
			}
			add(v)
		}
	}
	return out, nil
}

// render fills the template's remaining {names} from vars.
func (t mqttTemplate) render(vars map[string]string) (string, error) {
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
			if v, err = mqttTopicValue(p.name, vars[p.name], "the packet"); err != nil {
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

func mqttTopicValue(name, v, from string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("topic variable {%s} has no value in %s", name, from)
	}
	if strings.ContainsAny(v, "/+#\x00") {
		return "", fmt.Errorf("topic variable {%s} = %q: '/', '+', '#' and NUL are not allowed", name, v)
	}
	return v, nil
}

// mqttTopicError is a topic that cannot be made for a packet.
type mqttTopicError struct{ error }

// Permanent reports that retrying the packet cannot fix the error.
func (mqttTopicError) Permanent() bool { return true }

func (e mqttTopicError) Unwrap() error { return e.error }

// headField returns the string value that follows key in a packet's JSON,
// as the packet encoder writes it, or "" if there is none.
func headField(data []byte, key string) string {
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return ""
	}
	rest := data[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// ExpandTopic fills in a topic template's {names} from vars: every name
// must have a value.
func ExpandTopic(tmpl string, vars map[string]string) (string, error) {
	t, err := mqttParseTemplate(tmpl)
	if err == nil {
		t, err = t.bind(vars)
	}
	if err != nil {
		return "", err
	}
	return t.render(nil)
}

// CheckStatusTopic reports whether tmpl can be an MQTT upstream's status topic
// (uplink.status_topic): empty (the default), "off", or a topic
// whose only {names} are {site} and {gateway}, the ones a gateway fills in.
// It is for checking a site file; newMQTT checks it again with the values.
func CheckStatusTopic(tmpl string) error { return checkSiteTopic(tmpl, statusTopicOff) }

// CheckProbeTopic reports whether tmpl can be a [PoolConfig.ProbeTopic]
// (uplink.probe_topic): empty (the default), "off", or a topic
// whose only {names} are {site} and {gateway}.
func CheckProbeTopic(tmpl string) error { return checkSiteTopic(tmpl, probeTopicOff) }

// checkSiteTopic checks a topic template that a gateway fills with
// {site} and {gateway} alone; "" and off are allowed.
func checkSiteTopic(tmpl, off string) error {
	if tmpl == "" || tmpl == off {
		return nil
	}
	_, err := ExpandTopic(tmpl, map[string]string{"site": "s", "gateway": "g"})
	return err
}
