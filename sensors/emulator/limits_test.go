package emulator

import (
	"testing"

	"fieldlink/sensors/modbus"
)

// TestLimitsAreModbus: the emulator's own copy of the protocol's limit is
// the Modbus package's.
func TestLimitsAreModbus(t *testing.T) {
	if maxReadRegisters != modbus.MaxReadRegisters {
		t.Errorf("maxReadRegisters = %d, modbus.MaxReadRegisters = %d", maxReadRegisters, modbus.MaxReadRegisters)
	}
}
