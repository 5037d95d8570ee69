package config

import (
	"fieldlink/internal/yamlconf"
	"fieldlink/uplink"
)

// upstreamChecker is a kind of upstream (uplink.Register's) that checks
// the settings of the site file it owns, on every upstream: mine says
// whether the upstream is of that kind. The kinds' packages keep their
// rules, so that this package need not know every kind.
type upstreamChecker interface {
	CheckSite(u *uplink.SiteUpstream, mine bool, f uplink.SiteFile)
}

// checkUpstream has every registered kind check the upstream up, at the
// field path f; known says its URL is valid, and so of a kind. It keeps
// the defaults the kinds fill in.
func (c *Config) checkUpstream(doc *yamlconf.Doc, f string, up *Upstream, known bool) {
	s := uplink.SiteUpstream{
		URL: up.URL, Known: known, Encoding: up.Encoding, Topic: up.Topic, Username: up.Username,
		TokenFile: up.TokenFile, HeadersFile: up.HeadersFile,
	}
	if up.Load != nil {
		s.LoadTopic = up.Load.Topic
	}
	if sp := up.Sparkplug; sp != nil {
		if sp.EdgeNode == "" {
			sp.EdgeNode = c.Gateway.ID
		}
		s.Sparkplug = &uplink.SiteSparkplug{GroupID: sp.GroupID, EdgeNode: sp.EdgeNode, PrimaryHost: sp.PrimaryHost}
	}
	var own uplink.Kind
	if known {
		own, _ = uplink.KindOf(up.URL, up.Encoding)
	}
	file := siteFile{c, doc, f}
	// Kinds compare as values: a registered kind is a comparable one.
	for _, k := range uplink.Kinds() {
		if ch, ok := k.(upstreamChecker); ok {
			ch.CheckSite(&s, known && k == own, file)
		}
	}
	up.Topic = s.Topic
}

// siteFile is the site file as a kind's check sees it: its errors against
// the fields under one upstream.
type siteFile struct {
	c     *Config
	doc   *yamlconf.Doc
	field string
}

func (s siteFile) Errorf(field, format string, args ...any) {
	s.doc.Errorf(s.field+"."+field, format, args...)
}

func (s siteFile) Path(p string) string { return s.c.rel(p) }

func (siteFile) Readable(path string) error { return readable(path) }
