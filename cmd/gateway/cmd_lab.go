//go:build !field

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"fieldlink/selector/lab"
)

// cmdLab runs the selector lab (package selector/lab) and writes its report,
// docs/selector-lab.md by default, with its charts in a lab/ directory
// beside it.
func cmdLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("lab", stderr)
	scenarios := fs.String("scenarios", "", "comma-separated scenarios or prefixes, e.g. S1,S4 (default: all)")
	strategies := fs.String("strategies", "", "comma-separated strategies, name or name+outlier (default: all, and two behind the outlier layer)")
	seeds := fs.Int("seeds", 20, "seeds per scenario and strategy")
	parallel := fs.Int("parallel", 0, "simulations at once (default GOMAXPROCS; does not change the results)")
	out := fs.String("o", "docs/selector-lab.md", `report file; "-" for stdout (then no charts)`)
	single := fs.Bool("single-attempt", false, "no retries: a failed attempt fails its packet (the default retries as the uplink does)")
	tune := fs.Bool("tune", false, "tune drf_cswlc's constants by cuckoo search on training scenarios and seeds, check them on held-out ones, print the result (about 15 minutes on 2 cores)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *tune {
		t, err := lab.Tune(ctx, lab.TuneConfig{Progress: stderr})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tuned:    %s\n  training %+.4f, held out %+.4f (mean ln of p99 ÷ the best baseline's; below 0 beats it)\n", t.Name, t.TrainScore, t.HeldScore)
		fmt.Fprintf(stdout, "defaults: training %+.4f, held out %+.4f\n", t.DefaultTrainScore, t.DefaultHeldScore)
		return nil
	}
	if *seeds <= 0 {
		return fmt.Errorf("-seeds must be positive")
	}
	cfg := lab.Config{Seeds: *seeds, Parallel: *parallel, Progress: stderr, SingleAttempt: *single}
	if *scenarios != "" {
		cfg.Scenarios = strings.Split(*scenarios, ",")
	}
	if *strategies != "" {
		cfg.Strategies = strings.Split(*strategies, ",")
	}
	start := time.Now()
	rep, err := lab.Run(ctx, cfg)
	if err != nil {
		return err
	}
	doc := rep.Markdown("lab")
	if *out == "-" {
		_, err := stdout.Write(doc)
		return err
	}
	dir := filepath.Join(filepath.Dir(*out), "lab")
	svgs := rep.SVGs()
	if len(svgs) > 0 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(svgs))
	for n := range svgs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), svgs[n], 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(*out, doc, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "lab: wrote %s and %d charts in %s in %v\n", *out, len(names), dir, time.Since(start).Round(time.Second))
	return nil
}
