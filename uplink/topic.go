package uplink

import "fieldlink/uplink/internal/topic"

// ExpandTopic fills in a topic template's {names} from vars: every name
// must have a value.
func ExpandTopic(tmpl string, vars map[string]string) (string, error) {
	return topic.Expand(tmpl, vars)
}

// CheckSiteTopic reports whether tmpl can be the MQTT upstreams' status
// topic ([PoolConfig.StatusTopic], uplink.status_topic) or probe topic
// ([PoolConfig.ProbeTopic], uplink.probe_topic): empty (the default),
// "off", or a topic whose only {names} are {site} and {gateway}, the ones
// a gateway fills in. It is for checking a site file; the MQTT kind checks
// the topics again with the values.
func CheckSiteTopic(tmpl string) error {
	if tmpl == "" || tmpl == topicOff {
		return nil
	}
	_, err := ExpandTopic(tmpl, map[string]string{"site": "s", "gateway": "g"})
	return err
}
