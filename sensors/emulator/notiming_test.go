//go:build !timing

package emulator

// checkWireTiming: without the timing tag, tests check only the lower
// bounds of the emulator's pacing, which a loaded machine cannot break.
const checkWireTiming = false
