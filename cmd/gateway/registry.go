package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"fieldlink/config"
	"fieldlink/uplink"
)

// registryFile keeps the registry's last good answer beside the buffer, so
// that a gateway restarting without network still knows its upstreams.
func registryFile(c *config.Config) string { return c.Buffer.Path + ".registry.json" }

// writeAtomic replaces path with data: write a temporary file, fsync it,
// rename it over path, fsync the directory.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// startRegistry seeds the upstreams from the last good registry answer and
// keeps them in step with the registry. Configured upstreams stay whatever
// the registry says; a registry upstream that disappears is retired: it is
// picked no more, and its connection closes once its deliveries in flight
// had time to finish.
func (n *north) startRegistry(c *config.Config, epoch string) error {
	r := c.Uplink.Registry
	owned := map[string]int{} // registry upstream URL → table index
	configured := map[string]bool{}
	for _, u := range c.Uplink.Upstreams {
		configured[u.URL] = true
	}
	reconcile := func(list []uplink.RegistryUpstream) {
		want := map[string]bool{}
		for _, ru := range list {
			want[ru.URL] = true
			if configured[ru.URL] {
				continue
			}
			if _, ok := owned[ru.URL]; ok {
				continue
			}
			q := 1
			cu := config.Upstream{URL: ru.URL, Weight: max(1, int(ru.Weight+0.5)), QoS: &q, Topic: "fieldlink/{site}/{gateway}/{data_type}"}
			if s, _ := config.UpstreamScheme(ru.URL); s == "http" || s == "https" {
				cu.Topic = ""
			}
			idx, err := n.addUpstream(c, cu, epoch)
			if err != nil {
				n.log.Error("registry upstream not usable", "err", err)
				continue
			}
			owned[ru.URL] = idx
			n.log.Info("registry added an upstream", "upstream", n.upstreamName(idx))
		}
		for url, idx := range owned {
			if want[url] {
				continue
			}
			delete(owned, url)
			n.retire(idx, 30*time.Second)
		}
	}
	reg, err := uplink.NewRegistry(uplink.RegistryConfig{
		URL: r.URL, Interval: r.Refresh, Logger: n.log.With("component", "registry"),
		OnChange: func(list []uplink.RegistryUpstream) {
			reconcile(list)
			if err := writeAtomic(registryFile(c), n.registry.Raw()); err != nil {
				n.log.Warn("registry list not saved", "err", err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("uplink.registry: %w", err)
	}
	n.registry = reg
	if data, err := os.ReadFile(registryFile(c)); err == nil {
		if list, err := uplink.ParseRegistry(data); err == nil {
			if err := reg.Seed(list); err == nil {
				n.log.Info("upstreams from the saved registry list", "count", len(list))
				reconcile(list)
			}
		} else {
			n.log.Warn("saved registry list unreadable; waiting for the registry", "err", err)
		}
	}
	n.wg.Go(func() { reg.Run(n.upCtx) })
	return nil
}
