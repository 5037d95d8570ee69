// Package site is an upstream's section of the site file as the kinds of
// upstream check it: the settings, and the file to report errors to. It is
// a leaf, so that the uplink's core, its kinds and the site file's loader
// share it without importing each other.
package site

import "fieldlink/uplink/internal/topic"

// Off as the status or probe topic turns that message off.
const Off = "off"

// CheckTopic reports whether tmpl can be the MQTT upstreams' status topic
// (uplink.status_topic) or probe topic (uplink.probe_topic): empty (the
// default), [Off], or a topic whose only {names} are {site} and {gateway},
// the ones a gateway fills in. The MQTT kind checks the topics again with
// the values.
func CheckTopic(tmpl string) error {
	if tmpl == "" || tmpl == Off {
		return nil
	}
	_, err := topic.Expand(tmpl, map[string]string{"site": "s", "gateway": "g"})
	return err
}

// Upstream is one upstream of the site file as the kinds check it: the
// settings a kind owns or refuses. A kind's check may fill in Topic's
// default; the loader keeps what it fills.
type Upstream struct {
	URL string
	// Known says the URL is valid and of a registered kind; an upstream
	// whose URL is not has that error already.
	Known       bool
	Encoding    string
	Topic       string
	Username    string
	TokenFile   string
	HeadersFile string
	LoadTopic   string
	// Sparkplug is the upstream's sparkplug settings, nil when it has none
	// (edge_node's default already filled in).
	Sparkplug *Sparkplug
}

// Sparkplug is an upstream's sparkplug settings.
type Sparkplug struct {
	GroupID, EdgeNode, PrimaryHost string
}

// File is what a kind's check of the site file reports to and reads
// through, so that its messages say file, line and field as the loader's
// own.
type File interface {
	// Errorf reports an error against field, a path under the upstream
	// ("token_file", "sparkplug.group_id").
	Errorf(field, format string, args ...any)
	// Path resolves a path the site file gives against the site file's
	// directory.
	Path(p string) string
	// Readable says why the file at path cannot be read; nil when it can.
	Readable(path string) error
}
