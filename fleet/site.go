package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"fieldlink/config"
)

// Dir is where a site's remote configuration state lives: beside its
// buffer file, which the service may write.
func Dir(c *config.Config) string { return filepath.Join(filepath.Dir(c.Buffer.Path), "remote") }

// localOnly are the settings a bundle may repeat but never change: the
// remote configuration itself and its trust keys, the downlink's switch,
// keys and consent to unsigned commands, the metrics and status listener
// and its token.
var localOnly = []struct {
	path []string
	get  func(*config.Config) any
}{
	{[]string{"remote_config"}, func(c *config.Config) any { return c.RemoteConfig }},
	{[]string{"metrics"}, func(c *config.Config) any { return c.Metrics }},
	{[]string{"downlink", "enabled"}, func(c *config.Config) any { return c.Downlink.Enabled }},
	{[]string{"downlink", "keys"}, func(c *config.Config) any { return c.Downlink.Keys }},
	{[]string{"downlink", "allow_unsigned"}, func(c *config.Config) any { return c.Downlink.AllowUnsigned }},
}

// Merge parses a bundle's site file with the strict parser of every site
// file, as if it sat beside the local file (relative paths resolve alike),
// refuses it if it changes a local-only setting, and gives it the local
// file's local-only settings.
func Merge(local *config.Config, site []byte, serial uint64, profiles config.ProfileSource) (*config.Config, error) {
	name := filepath.Join(filepath.Dir(local.File), "bundle-"+strconv.FormatUint(serial, 10)+".yaml")
	c, err := config.Parse(name, site, profiles)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	if err := yaml.Unmarshal(site, &tree); err != nil {
		return nil, err
	}
	for _, l := range localOnly {
		if !has(tree, l.path...) {
			continue
		}
		if a, b := enc(l.get(c)), enc(l.get(local)); !bytes.Equal(a, b) {
			return nil, fmt.Errorf("%s is local to each gateway: a bundle may leave it out or repeat it unchanged, not change it", dotted(l.path))
		}
	}
	c.RemoteConfig, c.Metrics = local.RemoteConfig, local.Metrics
	c.Downlink.Enabled, c.Downlink.Keys, c.Downlink.AllowUnsigned = local.Downlink.Enabled, local.Downlink.Keys, local.Downlink.AllowUnsigned
	c.File = local.File
	return c, nil
}

func has(tree map[string]any, path ...string) bool {
	var cur any = tree
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[p]; !ok {
			return false
		}
	}
	return true
}

func enc(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func dotted(p []string) string {
	s := p[0]
	for _, x := range p[1:] {
		s += "." + x
	}
	return s
}

// Startup returns the configuration a gateway starts from: the last
// known-good bundle merged with the local file, or the local file. A
// bundle that was on probation when the gateway stopped is reverted,
// whatever happened last (a bundle that crashes the gateway must not keep
// it in a restart loop). It never waits for the configuration server.
func Startup(local *config.Config, profiles config.ProfileSource) (*config.Config, State, error) {
	if local.RemoteConfig == nil {
		return local, State{}, nil
	}
	s := store{Dir(local)}
	st, err := s.load()
	if err != nil {
		return local, st, fmt.Errorf("remote configuration state unreadable, starting from the local file: %w", err)
	}
	if st.Serial != st.KnownGood { // on probation
		st.Reverted = append(st.Reverted, st.Serial)
		st.Last, st.Serial, st.Event, st.At = st.Serial, st.KnownGood, StateReverted, time.Now()
		st.Reason = "the gateway restarted while the bundle was on probation"
		st.ProbationUntil, st.ETag = time.Time{}, ""
		if err := s.save(st); err != nil {
			return local, st, err
		}
	}
	if st.KnownGood == 0 {
		return local, st, nil
	}
	c, err := loadBundle(s, local, st.KnownGood, profiles)
	if err != nil {
		return local, st, fmt.Errorf("known-good bundle %d unusable, starting from the local file: %w", st.KnownGood, err)
	}
	return c, st, nil
}

func loadBundle(s store, local *config.Config, serial uint64, profiles config.ProfileSource) (*config.Config, error) {
	site, err := s.bundle(serial)
	if err != nil {
		return nil, err
	}
	return Merge(local, site, serial, profiles)
}
