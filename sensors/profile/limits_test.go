package profile

import (
	"testing"

	"fieldlink/sensors/modbus"
)

// TestLimitsAreModbus: a profile's default read limits are the Modbus
// package's, which this package cannot import (see maxReadRegisters).
func TestLimitsAreModbus(t *testing.T) {
	var p Profile
	if p.MaxRegisters() != modbus.MaxReadRegisters || p.MaxBits() != modbus.MaxReadBits {
		t.Errorf("MaxRegisters, MaxBits = %d, %d; modbus: %d, %d", p.MaxRegisters(), p.MaxBits(), modbus.MaxReadRegisters, modbus.MaxReadBits)
	}
}
