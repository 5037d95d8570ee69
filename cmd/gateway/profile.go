//go:build !field

package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// startProfiles starts a CPU profile into cpu and arranges an allocation
// profile into mem (either may be empty); the returned function writes them.
// They measure the daemon as it runs, to find where its time per packet goes.
func startProfiles(cpu, mem string) (stop func(io.Writer), err error) {
	var cpuFile *os.File
	if cpu != "" {
		if cpuFile, err = os.Create(cpu); err != nil {
			return nil, fmt.Errorf("cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			cpuFile.Close()
			return nil, fmt.Errorf("cpuprofile: %w", err)
		}
	}
	return func(stderr io.Writer) {
		if cpuFile != nil {
			pprof.StopCPUProfile()
			if err := cpuFile.Close(); err != nil {
				fmt.Fprintf(stderr, "cpuprofile: %v\n", err)
			}
		}
		if mem != "" {
			if err := writeHeapProfile(mem); err != nil {
				fmt.Fprintf(stderr, "memprofile: %v\n", err)
			}
		}
	}, nil
}

// writeHeapProfile writes the allocation profile (allocs since start, and
// what is live) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
