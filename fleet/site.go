package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"fieldlink/config"
	"fieldlink/internal/yamlconf"
	"fieldlink/sensors/profile"
)

// Dir is where a site's remote configuration state lives: beside its
// buffer file, which the service may write.
func Dir(c *config.Config) string { return filepath.Join(filepath.Dir(c.Buffer.Path), "remote") }

// bundleMay are the site file's top-level settings a bundle may set: the
// site, the devices, the packets, the buffer's limits, the uplink and the
// downlink's rules. Within them, localOnly keeps the gateway's own, and
// the files an upstream names must lie in the fleet's secrets directory
// (checkFiles). A setting in neither list is refused: a new one is placed
// by hand, and docs/remote-config.md lists both.
var bundleMay = []string{"site", "gateway", "buses", "serial_sensors", "packet", "buffer", "uplink", "downlink"}

// localSetting is a setting a bundle may repeat but never change.
type localSetting struct {
	path []string
	get  func(*config.Config) any
}

// localOnly are the settings a bundle may repeat but never change: the
// remote configuration itself and its trust keys, the downlink's switch,
// keys and consent to unsigned commands, the metrics and status listener
// and its token, where profiles are read from (a profile decides which
// registers may be written), where the buffer and the fleet's state live,
// and who the gateway is.
var localOnly = []localSetting{
	// First: the metrics' default token file follows the buffer's path.
	{[]string{"buffer", "path"}, func(c *config.Config) any { return c.Buffer.Path }},
	{[]string{"profiles_dir"}, func(c *config.Config) any { return c.Rel(c.ProfilesDir) }},
	{[]string{"gateway", "id"}, func(c *config.Config) any { return c.Gateway.ID }},
	{[]string{"remote_config"}, func(c *config.Config) any { return c.RemoteConfig }},
	{[]string{"metrics"}, func(c *config.Config) any { return c.Metrics }},
	{[]string{"downlink", "enabled"}, func(c *config.Config) any { return c.Downlink.Enabled }},
	{[]string{"downlink", "keys"}, func(c *config.Config) any { return c.Downlink.Keys }},
	{[]string{"downlink", "allow_unsigned"}, func(c *config.Config) any { return c.Downlink.AllowUnsigned }},
}

// Merge parses a bundle's site file with the strict parser of every site
// file, as if it sat beside the local file (relative paths resolve alike,
// and profiles come from the local file's profiles_dir), refuses it if it
// sets what bundleMay does not list, changes a local-only setting or names
// a file outside the fleet's secrets directory, and gives it the local
// file's local-only settings.
func Merge(local *config.Config, site []byte, serial uint64, profiles config.ProfileSource) (*config.Config, error) {
	name := filepath.Join(filepath.Dir(local.File), "bundle-"+strconv.FormatUint(serial, 10)+".yaml")
	localProfiles := func(dir string) (profile.Set, error) {
		if dir == "" && local.ProfilesDir != "" {
			dir = local.Rel(local.ProfilesDir)
		}
		return profiles(dir)
	}
	c, err := config.Parse(name, site, localProfiles)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	if err := yaml.Unmarshal(site, &tree); err != nil {
		return nil, err
	}
	for k := range tree {
		if !slices.Contains(bundleMay, k) && !slices.ContainsFunc(localOnly, func(l localSetting) bool { return len(l.path) == 1 && l.path[0] == k }) {
			return nil, fmt.Errorf("fleet: a bundle may not set %s (docs/remote-config.md lists what it may)", k)
		}
	}
	for _, l := range localOnly {
		if !has(tree, l.path...) {
			continue
		}
		if a, b := enc(l.get(c)), enc(l.get(local)); !bytes.Equal(a, b) {
			return nil, fmt.Errorf("%s is local to each gateway: a bundle may leave it out or repeat it unchanged, not change it", dotted(l.path))
		}
	}
	if err := checkFiles(local, c, name, site); err != nil {
		return nil, err
	}
	c.RemoteConfig, c.Metrics = local.RemoteConfig, local.Metrics
	c.ProfilesDir, c.Buffer.Path, c.Gateway.ID = local.ProfilesDir, local.Buffer.Path, local.Gateway.ID
	c.Downlink.Enabled, c.Downlink.Keys, c.Downlink.AllowUnsigned = local.Downlink.Enabled, local.Downlink.Keys, local.Downlink.AllowUnsigned
	c.File = local.File
	return c, nil
}

// SecretsDir is the directory whose files a bundle may name (an
// upstream's password, token, headers, CA, certificate and key):
// remote_config.secrets_dir, by default secrets in the fleet's state
// directory (Dir). The fleet's operator puts them there; the gateway's
// own keys, tokens and the system's files are out of a bundle's reach.
func SecretsDir(local *config.Config) string {
	if r := local.RemoteConfig; r != nil && r.SecretsDir != "" {
		return local.Rel(r.SecretsDir)
	}
	return filepath.Join(Dir(local), "secrets")
}

// checkFiles refuses a bundle c whose upstreams name a file outside the
// secrets directory (by its path, and by where its links lead), one of
// the gateway's own secret files, or a password from the gateway's
// environment. An upstream the local file has (the same URL) may repeat
// the local file's own file or variable: the same secret to the same
// place. Errors name the bundle's file, line and field.
func checkFiles(local, c *config.Config, name string, site []byte) error {
	if c.Uplink == nil {
		return nil
	}
	doc, _ := yamlconf.Decode(name, site, &config.Config{})
	secrets := SecretsDir(local)
	own := ownFiles(local)
	for i, up := range c.Uplink.Upstreams {
		f := fmt.Sprintf("uplink.upstreams[%d].", i)
		var same *config.Upstream
		if local.Uplink != nil {
			if j := slices.IndexFunc(local.Uplink.Upstreams, func(l config.Upstream) bool { return l.URL == up.URL }); j >= 0 {
				same = &local.Uplink.Upstreams[j]
			}
		}
		files := upstreamFiles(&up)
		var sameFiles map[string]string
		if same != nil {
			sameFiles = upstreamFiles(same)
		}
		for _, field := range slices.Sorted(maps.Keys(files)) {
			p := files[field]
			if p == "" || (sameFiles != nil && sameFiles[field] == p && (!insecure(&up) || insecure(same))) {
				continue
			}
			if err := inside(secrets, c.Rel(p), own); err != nil {
				doc.Errorf(f+field, "%v: a bundle names files only in %s, the fleet's secrets directory", err, secrets)
			}
		}
		if up.PasswordEnv != "" && (same == nil || same.PasswordEnv != up.PasswordEnv) {
			doc.Errorf(f+"password_env", "a bundle may name the gateway's environment only for the upstream the local file gives it to (%s); put the password in a file in %s", up.URL, secrets)
		}
	}
	if err := doc.Err(); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// insecure reports whether up skips verifying its server: a local secret
// repeated for the same URL must not lose the check that it reaches that
// server.
func insecure(up *config.Upstream) bool { return up.TLS != nil && up.TLS.InsecureSkipVerify }

// upstreamFiles are the files an upstream names, by field.
func upstreamFiles(up *config.Upstream) map[string]string {
	m := map[string]string{"password_file": up.PasswordFile, "token_file": up.TokenFile, "headers_file": up.HeadersFile}
	if up.TLS != nil {
		m["tls.ca"], m["tls.cert"], m["tls.key"] = up.TLS.CA, up.TLS.Cert, up.TLS.Key
	}
	return m
}

// ownFiles are the gateway's own secrets and records, which no bundle
// names even when they lie in the secrets directory.
func ownFiles(local *config.Config) []string {
	own := []string{local.File, local.Metrics.TokenFile, local.Buffer.Path, filepath.Join(Dir(local), "state.json"), filepath.Join(Dir(local), floorFile)}
	if r := local.RemoteConfig; r != nil {
		for _, k := range r.Keys {
			own = append(own, local.Rel(k))
		}
	}
	for _, k := range local.Downlink.Keys {
		own = append(own, local.Rel(k))
	}
	return own
}

// inside reports why path is not a file of dir: outside it by its name,
// or by where its links lead, or one of own.
func inside(dir, path string, own []string) error {
	under := func(dir, p string) bool {
		rel, err := filepath.Rel(dir, p)
		return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if !under(filepath.Clean(dir), abs) {
		return fmt.Errorf("%s is outside the secrets directory", path)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if !under(realDir, real) {
		return fmt.Errorf("%s leads to %s, outside the secrets directory", path, real)
	}
	for _, o := range own {
		if r, err := filepath.EvalSymlinks(o); err == nil && r == real {
			return fmt.Errorf("%s is the gateway's own %s", path, o)
		}
	}
	return nil
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
