// Package emutest serves the project's emulated Modbus devices to a test.
// It is apart from testtool because the emulator's own tests use testtool.
package emutest

import (
	"context"
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
	return ServeDevices(t, rtu, Devices(t, names...), emulator.Options{Seed: 1})
}

// Devices returns the named embedded profiles as slaves 1, 2, … without
// faults, for a test to give some of them Faults before ServeDevices.
func Devices(t testing.TB, names ...string) []emulator.Device {
	t.Helper()
	set, err := profile.Load(firmwareprofiles.FS, "")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := emulator.Slaves(set, names...)
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// ServeDevices is Serve for devices and options of the test's own: faults,
// a fixed clock, an OnRequest hook.
func ServeDevices(t testing.TB, rtu bool, devs []emulator.Device, opt emulator.Options) (*emulator.Emulator, string) {
	t.Helper()
	emu, err := emulator.New(devs, opt)
	if err != nil {
		t.Fatal(err)
	}
	if rtu {
		return emu, testtool.ServeLoopback(t, emu.ServeRTUOverTCP)
	}
	return emu, testtool.ServeLoopback(t, emu.ServeTCP)
}

// ServePty serves emu as RTU on one end of a socat pty pair at baud with
// parity (8 data bits, 1 stop bit) until the test ends, and returns the
// other end.
func ServePty(t testing.TB, emu *emulator.Emulator, baud int, parity byte) string {
	t.Helper()
	a, b := testtool.PtyPair(t)
	ServeLine(t, emu, a, baud, parity)
	return b
}

// ServeLine serves emu as RTU on the serial line at path at baud with
// parity (8 data bits, 1 stop bit) until the test ends.
func ServeLine(t testing.TB, emu *emulator.Emulator, path string, baud int, parity byte) {
	t.Helper()
	port, err := emulator.OpenSerial(path, baud, parity, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { port.Close() }) // runs after ServeRTU has returned
	testtool.Serve(t, func(ctx context.Context) error {
		return emu.ServeRTU(ctx, port, baud, emulator.CharBits(parity, 8, 1))
	})
}
