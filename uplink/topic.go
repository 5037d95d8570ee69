package uplink

import "fieldlink/uplink/internal/topic"

// ExpandTopic fills in a topic template's {names} from vars: every name
// must have a value.
func ExpandTopic(tmpl string, vars map[string]string) (string, error) {
	return topic.Expand(tmpl, vars)
}
