//go:build field

package main

import (
	"context"
	"fmt"
	"io"
)

// fieldBuild leaves out of the binary that ships to sites (go build -tags
// field, as scripts/cross-build does) what a site does not run: the demo,
// the selector lab, the emulator and the Delphi step. Each would push the
// ARM binary over its 10 MiB budget: the demo's embedded MQTT brokers
// alone, the emulator by 104 KB and the Delphi step by 65 KB.
const fieldBuild = true

func cmdDemo(context.Context, []string, io.Writer, io.Writer) error { return notInFieldBuild("demo") }
func cmdLab(context.Context, []string, io.Writer, io.Writer) error  { return notInFieldBuild("lab") }

// cmdEmulate: emulated sensors are for a bench, not a site; any build but
// the field one serves them (go build ./cmd/gateway makes one).
func cmdEmulate(context.Context, []string, io.Writer, io.Writer) error {
	return notInFieldBuild("emulate")
}

// cmdDelphi: the Delphi step is done once, off site, on the experts'
// estimates; its output goes into the site file.
func cmdDelphi(context.Context, []string, io.Writer, io.Writer) error {
	return notInFieldBuild("delphi")
}

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
