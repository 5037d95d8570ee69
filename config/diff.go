package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"os"
)

// Change is what differs between two site files, as a running gateway
// sees it (see [Diff]).
type Change struct {
	// Restart names what a reload cannot apply to a running gateway: the
	// buffer (its file is open), the metrics listener, whether there is a
	// remote configuration (its manager runs from the start) and whether
	// there is an uplink at all.
	Restart []string
	// Sensors: anything the pollers or the packets depend on — the site's
	// identity and time zone, buses, devices, serial sensors, the packet
	// encoding, or a firmware profile's content.
	Sensors bool
	// Uplink: the uplink's settings, the downlink's or the remote
	// configuration's topics (subscribed by the upstreams), or the site
	// and gateway ids the topics use. What the files the site file names
	// hold (passwords, tokens, headers, TLS files, keys) and password_env's
	// value are not part of a Config: the caller compares
	// [UplinkDigest] and [KeysDigest] taken when it applied the running
	// file with the ones the new file gives now.
	Uplink bool
}

// Diff compares a running configuration a with a new one b. Parts are
// compared by their canonical JSON encoding: every setting is an exported
// field, and derived state (compiled regular expressions, loaded time
// zones) is not, so two loads of the same file compare equal.
func Diff(a, b *Config) Change {
	var c Change
	if !same(a.Buffer, b.Buffer) {
		c.Restart = append(c.Restart, "buffer")
	}
	if !same(a.Metrics, b.Metrics) {
		c.Restart = append(c.Restart, "metrics")
	}
	// The remote configuration's manager takes its url, interval, keys and
	// probation from a reread file (fleet.Manager.SetLocal); its topics
	// are the uplink's. Only starting or stopping it needs a restart.
	ra, rb := a.RemoteConfig, b.RemoteConfig
	if (ra == nil) != (rb == nil) {
		c.Restart = append(c.Restart, "remote_config added or removed")
	}
	topicsChanged := ra != nil && rb != nil && (ra.PullTopic != rb.PullTopic || ra.StateTopic != rb.StateTopic)
	if (a.Uplink == nil) != (b.Uplink == nil) {
		c.Restart = append(c.Restart, "uplink added or removed")
	}
	c.Sensors = a.Site != b.Site || a.Gateway != b.Gateway || a.Packet != b.Packet ||
		!same(a.Buses, b.Buses) || !same(a.SerialSensors, b.SerialSensors) || !same(a.Profiles, b.Profiles)
	c.Uplink = a.Site.ID != b.Site.ID || a.Gateway.ID != b.Gateway.ID || !same(a.Uplink, b.Uplink) || !same(a.Downlink, b.Downlink) || topicsChanged ||
		c.Sensors && b.sparkplugNode() // its births list the devices and their points
	return c
}

// same reports whether x and y encode to the same JSON. A value that does
// not encode counts as changed.
func same(x, y any) bool {
	bx, errx := json.Marshal(x)
	by, erry := json.Marshal(y)
	return errx == nil && erry == nil && bytes.Equal(bx, by)
}

// UplinkFiles are the files the uplink reads beside the site file, resolved
// as [Config.Rel] does: every upstream's password_file, token_file,
// headers_file and TLS files (ca, cert, key), in upstream order.
func (c *Config) UplinkFiles() []string {
	var files []string
	add := func(p string) {
		if p != "" {
			files = append(files, c.Rel(p))
		}
	}
	if c.Uplink != nil {
		for _, u := range c.Uplink.Upstreams {
			add(u.PasswordFile)
			add(u.TokenFile)
			add(u.HeadersFile)
			if u.TLS != nil {
				add(u.TLS.CA)
				add(u.TLS.Cert)
				add(u.TLS.Key)
			}
		}
	}
	return files
}

// KeyFiles are the public key files the site file names, resolved: the
// downlink's keys, then the remote configuration's.
func (c *Config) KeyFiles() []string {
	var files []string
	for _, k := range c.Downlink.Keys {
		files = append(files, c.Rel(k))
	}
	if c.RemoteConfig != nil {
		for _, k := range c.RemoteConfig.Keys {
			files = append(files, c.Rel(k))
		}
	}
	return files
}

// UplinkDigest hashes what the uplink reads beside the site file, as it
// reads now: the contents of [Config.UplinkFiles] and the value of every
// password_env. A file corrected in place (a token, a certificate) leaves
// the site file as it was, so only this tells a reload that the uplink
// must be rebuilt. The secrets themselves are not kept.
func UplinkDigest(c *Config) [32]byte {
	h := sha256.New()
	if c.Uplink != nil {
		for _, u := range c.Uplink.Upstreams {
			if u.PasswordEnv != "" {
				v, ok := os.LookupEnv(u.PasswordEnv)
				fmt.Fprintf(h, "env %q %v %d:%s\x00", u.PasswordEnv, ok, len(v), v)
			}
		}
	}
	return filesDigest(h, c.UplinkFiles())
}

// KeysDigest hashes the contents of [Config.KeyFiles] as they read now.
func KeysDigest(c *Config) [32]byte {
	return filesDigest(sha256.New(), c.KeyFiles())
}

// filesDigest adds each file's path and content to h, or its error when it
// cannot be read (so that a file that comes back counts as a change), and
// returns the sum.
func filesDigest(h hash.Hash, files []string) [32]byte {
	for _, f := range files {
		b, err := os.ReadFile(f)
		fmt.Fprintf(h, "file %q %v %d:", f, err, len(b))
		h.Write(b)
		h.Write([]byte{0})
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}
