package config

import (
	"fmt"
	"net/url"
	"time"

	"fieldlink/internal/yamlconf"
)

// Remote configuration defaults: one place.
const (
	DefaultRemoteInterval   = 5 * time.Minute
	DefaultProbation        = 10 * time.Minute
	DefaultPullTopic        = "fieldlink/{site}/{gateway}/config/pull"
	DefaultConfigStateTopic = "fieldlink/{site}/{gateway}/config/state"
	minRemoteInterval       = 10 * time.Second
	minProbation            = 30 * time.Second
)

// RemoteConfig makes the gateway pull signed site files (bundles) from the
// fleet's configuration server. Local only: a bundle cannot change it.
type RemoteConfig struct {
	// URL of this gateway's bundle: https:// (or http:// on a closed
	// network); fetched with a conditional GET.
	URL string `yaml:"url,required"`
	// Interval between pulls; default 5m. A message on PullTopic asks for
	// one at once.
	Interval time.Duration `yaml:"interval"`
	// Keys are the Ed25519 public key files whose signatures are trusted.
	Keys []string `yaml:"keys,required"`
	// Probation: how long an applied bundle is watched before it becomes
	// the known-good configuration; default 10m. It is reverted if it
	// loses every upstream that was reachable, or more than 10 points of
	// the devices answering, or if it never reaches what the configuration
	// before it reached (docs/remote-config.md).
	Probation time.Duration `yaml:"probation"`
	// PullTopic: an MQTT message on it asks for an early pull (never a
	// push: the message's content is ignored). Default DefaultPullTopic.
	PullTopic string `yaml:"pull_topic"`
	// StateTopic: where the gateway reports {serial, state, reason},
	// retained. Default DefaultConfigStateTopic.
	StateTopic string `yaml:"state_topic"`
	// SecretsDir is the only directory whose files a bundle may name (an
	// upstream's password, token, headers and TLS files), relative to the
	// site file; default: secrets in the fleet's state directory, beside
	// the buffer (remote/secrets). Put none of the gateway's own keys or
	// tokens there.
	SecretsDir string `yaml:"secrets_dir"`
}

func (c *Config) validateRemote(doc *yamlconf.Doc) {
	r := c.RemoteConfig
	if r == nil {
		return
	}
	if r.Interval == 0 {
		r.Interval = DefaultRemoteInterval
	}
	if r.Probation == 0 {
		r.Probation = DefaultProbation
	}
	if r.PullTopic == "" {
		r.PullTopic = DefaultPullTopic
	}
	if r.StateTopic == "" {
		r.StateTopic = DefaultConfigStateTopic
	}
	if u, err := url.Parse(r.URL); r.URL != "" && (err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "") {
		doc.Errorf("remote_config.url", "%q must be an https:// (or http://) URL of this gateway's bundle", r.URL)
	} else if err == nil && u.User != nil {
		doc.Errorf("remote_config.url", "put no credentials in the URL")
	}
	if r.Interval < minRemoteInterval {
		doc.Errorf("remote_config.interval", "must be at least %v, got %v", minRemoteInterval, r.Interval)
	}
	if r.Probation < minProbation {
		doc.Errorf("remote_config.probation", "must be at least %v, got %v", minProbation, r.Probation)
	}
	if len(r.Keys) == 0 && doc.Has("remote_config.keys") {
		doc.Errorf("remote_config.keys", "give at least one public key file (gateway keygen writes them): unsigned configuration is never accepted")
	}
	for i, k := range r.Keys {
		if err := readable(c.rel(k)); err != nil {
			doc.Errorf(fmt.Sprintf("remote_config.keys[%d]", i), "%v (give an Ed25519 public key file written by gateway keygen)", err)
		}
	}
	if c.Uplink == nil {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s: remote_config without an uplink: no early pulls and no state reports", c.File))
	}
}
