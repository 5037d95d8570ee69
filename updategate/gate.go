package updategate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"fieldlink/buffer"
	"fieldlink/config"
)

// Settings are the part of a site file the update gate reads. They are read
// leniently, not through the strict loader: the updater that runs the gate
// lacks the service's environment (password_env), and a site file written
// for a newer version must not stop an older one from judging its own
// daemon.
type Settings struct {
	Metrics struct {
		Listen      string `yaml:"listen"`
		AllowRemote bool   `yaml:"allow_remote"`
		ScrapeToken bool   `yaml:"scrape_token"`
		// TokenFile is resolved as the daemon resolves it: relative to the
		// site file, by default beside the buffer.
		TokenFile string `yaml:"token_file"`
	} `yaml:"metrics"`
	Buffer struct {
		// Path is resolved relative to the site file, as the daemon does.
		Path string `yaml:"path"`
	} `yaml:"buffer"`
}

// ReadSettings reads the metrics listener, its token and the buffer path of a
// site file, with their defaults.
func ReadSettings(file string) (Settings, error) {
	var s Settings
	data, err := os.ReadFile(file)
	if err != nil {
		return s, err
	}
	if err := yaml.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", file, err)
	}
	if s.Metrics.Listen == "" {
		s.Metrics.Listen = config.DefaultMetricsListen
	}
	if s.Metrics.Listen == "off" {
		return s, fmt.Errorf("%s: metrics.listen is off: gateway health reads the daemon's /metrics (give metrics.listen, such as %s)", file, config.DefaultMetricsListen)
	}
	rel := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(filepath.Dir(file), p)
	}
	if s.Buffer.Path == "" {
		s.Buffer.Path = config.DefaultBufferPath
	}
	s.Buffer.Path = rel(s.Buffer.Path)
	if s.Metrics.TokenFile == "" {
		s.Metrics.TokenFile = filepath.Join(filepath.Dir(s.Buffer.Path), config.DefaultTokenFile)
	}
	s.Metrics.TokenFile = rel(s.Metrics.TokenFile)
	return s, nil
}

// Target is where the gate reads the daemon's metrics. With allow_remote
// and scrape_token the daemon asks every client that is not on loopback
// for its token, and the gate is one when the listener is a LAN address
// (it connects from that address): the gate then sends the token of
// metrics.token_file, which it reads as root or as the service's user. A
// listener on every interface is reached on loopback, where no token is
// asked; a token file that does not exist yet (no daemon has started with
// allow_remote) leaves the scrape to say what the daemon answers.
func (s Settings) Target() (Target, error) {
	t := Target{Addr: s.Metrics.Listen}
	if !s.Metrics.AllowRemote || !s.Metrics.ScrapeToken {
		return t, nil
	}
	data, err := os.ReadFile(s.Metrics.TokenFile)
	switch {
	case err == nil:
		t.Token = strings.TrimSpace(string(data))
		return t, nil
	case errors.Is(err, fs.ErrNotExist) || onLoopback(dialAddr(t.Addr)):
		return t, nil
	}
	return t, fmt.Errorf("metrics.scrape_token: the daemon asks for the token of metrics.token_file on %s/metrics, and the gate cannot read it: %w; run gateway health as root (as the updater does) or as the service's user",
		dialAddr(t.Addr), err)
}

// BaselineFile is where the baseline of an update is kept: beside the
// buffer.
func (s Settings) BaselineFile() string { return s.Buffer.Path + ".update.json" }

// Wait judges the daemon at t against base every second until it passes
// or wait has passed; progress sees each new reason it does not pass yet.
// It returns the summary of a daemon that passes, or the last reason why
// not.
func Wait(ctx context.Context, t Target, base *Baseline, c Criteria, wait time.Duration, progress func(elapsed time.Duration, why string)) (summary string, why string, err error) {
	start := time.Now()
	deadline := start.Add(wait)
	last := ""
	for {
		s, err := t.Scrape(ctx)
		if err != nil {
			why, summary = err.Error(), ""
		} else {
			why, summary = Judge(s, base, c)
		}
		if why == "" {
			return summary, "", nil
		}
		if why != last && progress != nil {
			progress(time.Since(start), why)
			last = why
		}
		if !time.Now().Before(deadline) {
			return "", why, nil
		}
		select {
		case <-ctx.Done():
			return "", why, ctx.Err()
		case <-time.After(min(time.Second, time.Until(deadline))):
		}
	}
}

// Formats is what a version reads and writes in its buffer file, as
// gateway health -formats prints it.
type Formats struct {
	Version string `json:"version"`
	Buffer  struct {
		Reads  *buffer.Formats `json:"reads"`
		Writes *buffer.Formats `json:"writes"`
	} `json:"buffer"`
}

// BinaryFormats are the formats of this binary (of version version).
func BinaryFormats(version string) Formats {
	var v Formats
	r, w := buffer.ReadFormats(), buffer.WriteFormats()
	v.Version, v.Buffer.Reads, v.Buffer.Writes = version, &r, &w
	return v
}

// ReadableBy refuses when the version described in file (its -formats
// output) does not read a buffer format this version writes: after a
// rollback to it, the packets this version stored would be taken for
// corruption. It returns the other version.
func ReadableBy(file, version string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var other Formats
	if err := json.Unmarshal(data, &other); err != nil || other.Buffer.Reads == nil {
		return "", fmt.Errorf("%s: not the output of gateway health -formats (%v)", file, err)
	}
	if missing := other.Buffer.Reads.Unreadable(buffer.WriteFormats()); len(missing) > 0 {
		return other.Version, fmt.Errorf("a rollback to fieldlink %s would strand packets: this version (%s) writes buffer %s, which %s does not read; "+
			"update to a version that reads them first", other.Version, version, strings.Join(missing, ", "), other.Version)
	}
	return other.Version, nil
}
