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
