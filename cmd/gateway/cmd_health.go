package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"fieldlink/buffer"
	"fieldlink/config"
	"fieldlink/health"
	"fieldlink/metrics"
)

// defaultSiteFile is the site file of the Debian package.
const defaultSiteFile = "/etc/fieldlink/site.yaml"

// cmdHealth is "gateway health": the gate an updater runs before it
// commits a new version (see docs/fleet.md). It judges the running daemon
// from its /metrics until it is healthy or -wait passes; -record notes,
// before the update, what the judgement is to be measured against; -formats
// and -readable-by keep a rollback from stranding packets in a buffer file
// the previous version cannot read.
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("health", stderr)
	file := fs.String("c", defaultSiteFile, "site file of the running gateway (its metrics.listen and buffer.path)")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the daemon to be healthy; longer than the slowest device's interval")
	cycles := fs.Int("cycles", health.DefaultCriteria.Cycles, "successful polls of the busiest device, and records stored, that make a healthy daemon")
	maxDrop := fs.Float64("max-drop", health.DefaultCriteria.MaxDrop*100, "largest fall, in points, of the share of devices answering since the baseline")
	record := fs.Bool("record", false, "before an update: record whether an upstream is reachable and how many devices answer, beside the buffer")
	forget := fs.Bool("forget", false, "after an update is committed or rolled back: delete the recorded baseline")
	formats := fs.Bool("formats", false, "print the buffer file formats this version reads and writes (JSON)")
	readableBy := fs.String("readable-by", "", "fail unless the version whose -formats output is in `FILE` reads every buffer format this one writes")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *formats:
		return printFormats(stdout)
	case *readableBy != "":
		return checkReadableBy(*readableBy, stdout)
	}
	site, err := readHealthSite(*file)
	if err != nil {
		return err
	}
	baselineFile := site.Buffer.Path + ".update.json"
	switch {
	case *forget:
		if err := os.Remove(baselineFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	case *record:
		s, err := health.Scrape(ctx, site.Metrics.Listen)
		var sp *health.Sample
		if err == nil {
			sp = &s
		}
		b := health.NewBaseline(sp, err, time.Now(), version)
		if err := health.WriteBaseline(baselineFile, b); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "recorded in %s: %s\n", baselineFile, b)
		return nil
	}
	base, err := health.ReadBaseline(baselineFile)
	if err != nil {
		return err
	}
	crit := health.Criteria{Cycles: *cycles, MaxDrop: *maxDrop / 100}
	start := time.Now()
	deadline := start.Add(*wait)
	last := ""
	for {
		var why, summary string
		s, err := health.Scrape(ctx, site.Metrics.Listen)
		if err != nil {
			why = err.Error()
		} else {
			why, summary = health.Judge(s, base, crit)
		}
		if why == "" {
			fmt.Fprintf(stdout, "healthy after %s: %s\n", time.Since(start).Round(time.Second), summary)
			return nil
		}
		if why != last {
			fmt.Fprintf(stderr, "health: %s: %s\n", time.Since(start).Round(time.Second), why)
			last = why
		}
		if !time.Now().Before(deadline) {
			fmt.Fprintf(stdout, "unhealthy after %s: %s\n", *wait, why)
			if base != nil {
				fmt.Fprintf(stdout, "baseline %s\n", base)
			}
			return errSilent
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Second, time.Until(deadline))):
		}
	}
}

// healthSite is the part of a site file that gateway health reads. It is
// read leniently, not through the strict loader: the updater that runs it
// lacks the service's environment (password_env), and a site file written
// for a newer version must not stop an older one from judging its own
// daemon.
type healthSite struct {
	Metrics struct {
		Listen string `yaml:"listen"`
	} `yaml:"metrics"`
	Buffer struct {
		Path string `yaml:"path"`
	} `yaml:"buffer"`
}

func readHealthSite(file string) (healthSite, error) {
	var s healthSite
	data, err := os.ReadFile(file)
	if err != nil {
		return s, err
	}
	if err := yaml.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", file, err)
	}
	if s.Metrics.Listen == "" {
		s.Metrics.Listen = metrics.DefaultListen
	}
	if s.Metrics.Listen == "off" {
		return s, fmt.Errorf("%s: metrics.listen is off: gateway health reads the daemon's /metrics (give metrics.listen, such as %s)", file, metrics.DefaultListen)
	}
	if s.Buffer.Path == "" {
		s.Buffer.Path = config.DefaultBufferPath
	}
	return s, nil
}

// versionFormats is what gateway health -formats prints.
type versionFormats struct {
	Version string `json:"version"`
	Buffer  struct {
		Reads  *buffer.Formats `json:"reads"`
		Writes *buffer.Formats `json:"writes"`
	} `json:"buffer"`
}

func printFormats(stdout io.Writer) error {
	var v versionFormats
	r, w := buffer.ReadFormats(), buffer.WriteFormats()
	v.Version, v.Buffer.Reads, v.Buffer.Writes = version, &r, &w
	return json.NewEncoder(stdout).Encode(v)
}

// checkReadableBy refuses when the version described in file (its -formats
// output) does not read a buffer format this version writes: after a
// rollback to it, the packets this version stored would be taken for
// corruption.
func checkReadableBy(file string, stdout io.Writer) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var other versionFormats
	if err := json.Unmarshal(data, &other); err != nil || other.Buffer.Reads == nil {
		return fmt.Errorf("%s: not the output of gateway health -formats (%v)", file, err)
	}
	missing := other.Buffer.Reads.Unreadable(buffer.WriteFormats())
	if len(missing) > 0 {
		return fmt.Errorf("a rollback to fieldlink %s would strand packets: this version (%s) writes buffer %s, which %s does not read; "+
			"update to a version that reads them first", other.Version, version, strings.Join(missing, ", "), other.Version)
	}
	fmt.Fprintf(stdout, "fieldlink %s reads every buffer format %s writes: a rollback keeps the packets\n", other.Version, version)
	return nil
}
