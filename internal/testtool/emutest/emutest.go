// Package emutest serves the project's emulated Modbus devices to a test.
// It is apart from testtool because the emulator's own tests use testtool.
package emutest

import (
	"testing"

	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
)

// Serve serves the named embedded profiles as slaves 1, 2, … on a loopback
// port until the test ends, over Modbus TCP or, with rtu, RTU over TCP. It
// returns the emulator and its host:port.
func Serve(t testing.TB, rtu bool, names ...string) (*emulator.Emulator, string) {
	t.Helper()
	set, err := profile.Load(firmwareprofiles.FS, "")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := emulator.Slaves(set, names...)
	if err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.New(devs, emulator.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rtu {
		return emu, testtool.ServeLoopback(t, emu.ServeRTUOverTCP)
	}
	return emu, testtool.ServeLoopback(t, emu.ServeTCP)
}
