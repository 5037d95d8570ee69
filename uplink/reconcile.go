package uplink

import (
	"math"
	"time"
)

// Reconcile brings the pool's registry upstreams in step with a registry's
// list: a new name is connected with the settings template gives it, a
// known one takes its new weight (0 drains it: connected, not picked), and
// one the list no longer has is retired and closed after grace.
//
// An entry whose name is an upstream of the site file is that upstream: the
// site file's settings and weight stay, and the registry never retires it.
// Names, not URLs, are compared, so a URL that differs from a site
// upstream's only in its credentials is the site upstream.
//
// It logs what it changes and what it cannot use, and returns how many
// upstreams the list added.
func (p *Pool) Reconcile(list []RegistryUpstream, template func(RegistryUpstream) UpstreamConfig, grace time.Duration) (added int) {
	// Retire first: the table reuses a retired upstream's index, so a list
	// that replaces its names never fills it.
	names := make([]string, len(list))
	want := map[string]bool{}
	for i, ru := range list {
		if name, err := UpstreamName(ru.URL); err == nil {
			names[i] = name
			want[name] = true
		}
	}
	owners := p.names()
	for name, owner := range owners {
		if owner == "registry" && !want[name] {
			p.retire(name, grace)
		}
	}
	for i, ru := range list {
		name := names[i]
		if name == "" {
			_, err := UpstreamName(ru.URL)
			p.log.Error("registry upstream not usable", "err", err)
			continue
		}
		if owners[name] == "site" {
			continue
		}
		u := template(ru)
		u.Weight, u.Drain = registryWeight(ru.Weight), ru.Weight == 0
		_, known := owners[name]
		if _, err := p.add(u, "registry"); err != nil {
			p.log.Error("registry upstream not usable", "upstream", name, "err", err)
			continue
		}
		if !known {
			added++
			p.log.Info("registry added an upstream", "upstream", name, "weight", u.Weight)
		}
	}
	return added
}

// registryWeight turns a registry's weight into an upstream weight: rounded,
// 1 to 1000 (a weight of 0 drains the upstream instead).
func registryWeight(w float64) int {
	switch {
	case w <= 1 || math.IsNaN(w):
		return 1
	case w >= 1000:
		return 1000
	}
	return max(1, int(math.Round(w)))
}
