package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"fieldlink/updategate"
)

// defaultSiteFile is the site file of the Debian package.
const defaultSiteFile = "/etc/fieldlink/site.yaml"

// cmdHealth is "gateway health": the gate an updater runs before it
// commits a new version (see docs/fleet.md). It judges the running daemon
// from its /metrics until it passes (it prints "healthy after") or -wait
// passes; -record notes, before the update, what the verdict is to be
// measured against; -formats and -readable-by keep a rollback from
// stranding packets in a buffer file the previous version cannot read.
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("health", stderr)
	file := fs.String("c", defaultSiteFile, "site file of the running gateway (its metrics listener and token, and buffer.path)")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the daemon to be healthy; longer than the slowest device's interval")
	cycles := fs.Int("cycles", updategate.DefaultCriteria.Cycles, "successful polls of the busiest device, and records stored, that make a healthy daemon")
	maxDrop := fs.Float64("max-drop", updategate.DefaultCriteria.MaxDrop*100, "largest fall, in points, of the share of devices answering since the baseline")
	record := fs.Bool("record", false, "before an update: record whether an upstream is reachable and how many devices answer, beside the buffer")
	forget := fs.Bool("forget", false, "after an update is committed or rolled back: delete the recorded baseline")
	formats := fs.Bool("formats", false, "print the buffer file formats this version reads and writes (JSON)")
	readableBy := fs.String("readable-by", "", "fail unless the version whose -formats output is in `FILE` reads every buffer format this one writes")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *formats:
		return json.NewEncoder(stdout).Encode(updategate.BinaryFormats(version))
	case *readableBy != "":
		other, err := updategate.ReadableBy(*readableBy, version)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "fieldlink %s reads every buffer format %s writes: a rollback keeps the packets\n", other, version)
		return nil
	}
	settings, err := updategate.ReadSettings(*file)
	if err != nil {
		return err
	}
	target, err := settings.Target()
	if err != nil {
		return err
	}
	baselineFile := settings.BaselineFile()
	switch {
	case *forget:
		if err := os.Remove(baselineFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	case *record:
		s, err := target.Scrape(ctx)
		var sp *updategate.Sample
		if err == nil {
			sp = &s
		}
		b := updategate.NewBaseline(sp, err, time.Now(), version)
		if err := updategate.WriteBaseline(baselineFile, b); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "recorded in %s: %s\n", baselineFile, b)
		return nil
	}
	base, err := updategate.ReadBaseline(baselineFile)
	if err != nil {
		return err
	}
	start := time.Now()
	summary, why, err := updategate.Wait(ctx, target, base, updategate.Criteria{Cycles: *cycles, MaxDrop: *maxDrop / 100}, *wait,
		func(elapsed time.Duration, why string) {
			fmt.Fprintf(stderr, "health: %s: %s\n", elapsed.Round(time.Second), why)
		})
	switch {
	case err != nil:
		return err
	case why == "":
		fmt.Fprintf(stdout, "healthy after %s: %s\n", time.Since(start).Round(time.Second), summary)
		return nil
	}
	fmt.Fprintf(stdout, "unhealthy after %s: %s\n", *wait, why)
	if base != nil {
		fmt.Fprintf(stdout, "baseline %s\n", base)
	}
	return errSilent
}
