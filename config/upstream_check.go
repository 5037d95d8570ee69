package config

import (
	"fieldlink/internal/yamlconf"
	"fieldlink/uplink"
	"fieldlink/uplink/site"
)

// checkUpstream has every kind of upstream check the settings it owns on
// up, at the field path f (uplink.CheckSite); known says its URL is valid,
// and so of a kind. It keeps the defaults the kinds fill in.
func (c *Config) checkUpstream(doc *yamlconf.Doc, f string, up *Upstream, known bool) {
	s := site.Upstream{
		URL: up.URL, Known: known, Encoding: string(up.Encoding), Topic: up.Topic, Username: up.Username,
		TokenFile: up.TokenFile, HeadersFile: up.HeadersFile,
	}
	if up.Load != nil {
		s.LoadTopic = up.Load.Topic
	}
	if sp := up.Sparkplug; sp != nil {
		if sp.EdgeNode == "" {
			sp.EdgeNode = c.Gateway.ID
		}
		s.Sparkplug = &site.Sparkplug{GroupID: sp.GroupID, EdgeNode: sp.EdgeNode, PrimaryHost: sp.PrimaryHost}
	}
	uplink.CheckSite(&s, siteFile{c, doc, f})
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
