//go:build field

package main

import (
	"context"
	"fmt"
	"io"
)

// fieldBuild leaves the demo and the selector lab out of the binary that
// ships to sites (go build -tags field, as scripts/cross-build does): a
// site runs neither, and the demo's embedded MQTT brokers alone would push
// the ARM binary over its 10 MiB budget.
const fieldBuild = true

func cmdDemo(context.Context, []string, io.Writer, io.Writer) error { return notInFieldBuild("demo") }
func cmdLab(context.Context, []string, io.Writer, io.Writer) error  { return notInFieldBuild("lab") }

func notInFieldBuild(name string) error {
	return fmt.Errorf("not in this build (the field build, -tags field, leaves it out); run it from a source checkout: go run ./cmd/gateway %s", name)
}

// startProfiles is not in the field build: runtime/pprof and its gzip
// writer would cost the ARM binary room it does not have.
func startProfiles(cpu, mem string) (stop func(io.Writer), err error) {
	if cpu != "" || mem != "" {
		return nil, notInFieldBuild("run -cpuprofile/-memprofile")
	}
	return func(io.Writer) {}, nil
}
