//go:build !field

package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"

	"fieldlink/selector/delphi"
)

// cmdDelphi is § 000's Delphi step: expert estimates in, the drf
// strategy's TR and N out as site-file YAML, with the rounds' checks.
func cmdDelphi(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("delphi", stderr)
	in := fs.String("i", "", "experts' CSV: expert,round,target,factor,lowest,highest,most_likely")
	asked := fs.Int("asked", 0, "how many experts were asked (default: as many as answered)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *in == "" {
		return fmt.Errorf("give -i experts.csv")
	}
	data, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	if *asked == 0 {
		*asked = experts(data)
		fmt.Fprintf(stderr, "%d experts in %s; give -asked N if more were asked\n", *asked, *in)
	}
	res, err := delphi.Read(bytes.NewReader(data), *asked)
	if err != nil && !errors.Is(err, delphi.ErrResponseRate) && !errors.Is(err, delphi.ErrConsensus) {
		return fmt.Errorf("%s: %w", *in, err)
	}
	if _, werr := stdout.Write(res.YAML()); werr != nil {
		return werr
	}
	if res.Failed != "" {
		fmt.Fprintf(stderr, "check failed: %s\n", res.Failed)
		return errSilent
	}
	return nil
}

// experts counts the distinct names in the CSV's first column, the header
// (if any) aside.
func experts(data []byte) int {
	rows, _ := csv.NewReader(bytes.NewReader(data)).ReadAll()
	seen := map[string]bool{}
	for i, r := range rows {
		if len(r) == 0 || (i == 0 && r[0] == "expert") {
			continue
		}
		seen[r[0]] = true
	}
	return max(1, len(seen))
}
