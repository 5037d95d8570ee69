//go:build timing

package emulator

// checkWireTiming holds the emulator's pacing to upper bounds as well, on a
// quiet machine: go test -tags timing ./sensors/emulator.
const checkWireTiming = true
