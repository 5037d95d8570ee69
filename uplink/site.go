package uplink

import (
	"strings"

	"fieldlink/uplink/site"
)

// siteChecker is a kind that checks the site file's settings it owns, on
// every upstream: mine says whether u is of that kind.
type siteChecker interface {
	CheckSite(u *site.Upstream, mine bool, f site.File)
}

// CheckSite has every registered kind check the site file's settings it
// owns on the upstream u, reporting to f, in the order the kinds were
// registered; u.Known says its URL is valid, and so of a kind.
func CheckSite(u *site.Upstream, f site.File) {
	own := -1
	if u.Known {
		if scheme, _, ok := strings.Cut(u.URL, "://"); ok {
			own = kindIndex(scheme, Encoding(u.Encoding))
		}
	}
	kinds.RLock()
	list := kinds.list
	kinds.RUnlock()
	for i, e := range list {
		if ch, ok := e.kind.(siteChecker); ok {
			ch.CheckSite(u, i == own, f)
		}
	}
}
