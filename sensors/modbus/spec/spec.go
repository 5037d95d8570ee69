// Package spec holds the Modbus application protocol's limits of the
// quantity per request (Modbus Application Protocol v1.1b3, §6), written
// once for the client, the profiles, the planner, the emulator, the site
// file and the command line. It is a leaf of its own, not part of
// sensors/modbus, because the profile model and the emulator need the
// numbers and sensors/modbus's own tests import both.
package spec

const (
	// MaxReadBits is the most coils or discrete inputs one read returns
	// (functions 1 and 2).
	MaxReadBits = 2000
	// MaxReadRegisters is the most registers one read returns (functions 3
	// and 4).
	MaxReadRegisters = 125
	// MaxWriteBits is the most coils one write sets (function 15).
	MaxWriteBits = 1968
	// MaxWriteRegisters is the most registers one write sets (function 16).
	MaxWriteRegisters = 123
)
