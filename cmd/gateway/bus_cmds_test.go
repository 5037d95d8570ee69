package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"fieldlink/internal/testtool"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
)

// pymodbus, a Modbus implementation nobody here wrote, answers gateway read.
func TestReadAgainstPymodbus(t *testing.T) {
	_, addr := testtool.StartPymodbusTCP(t, "../../sensors/modbus/testdata/pymodbus_server.py")
	url := "tcp://" + addr
	code, out, errOut := gw(t, "read", "-url", url, "-slave", "2", "-area", "input", "-address", "10", "-count", "3")
	if code != 0 || out != "[10]: 2510\n[11]: 2511\n[12]: 2512\n" {
		t.Fatalf("read: %d %q %s", code, out, errOut)
	}
	// Registers 3 and 4 of slave 1 hold 1003, 1004: as uint32 ABCD that is
	// 1003<<16 | 1004, as CDAB 1004<<16 | 1003.
	code, out, _ = gw(t, "read", "-url", url, "-slave", "1", "-address", "3", "-type", "uint32", "-order", "CDAB")
	if code != 0 || out != fmt.Sprintf("[3]: %d\n", 1004<<16|1003) {
		t.Fatalf("read uint32 CDAB: %q", out)
	}
	code, _, errOut = gw(t, "read", "-url", url, "-slave", "1", "-address", "500")
	if code != 1 || !strings.Contains(errOut, "illegal data address") {
		t.Fatalf("read past the map: %d %s", code, errOut)
	}
	code, out, _ = gw(t, "read", "-url", url, "-slave", "1", "-area", "coil", "-address", "0", "-count", "4")
	if code != 0 || out != "[0]: true\n[1]: false\n[2]: false\n[3]: true\n" {
		t.Fatalf("read coils: %q", out)
	}
}

// mbpoll, a reference Modbus master, reads the project's emulator.
func TestMbpollReadsTheEmulator(t *testing.T) {
	mbpoll := testtool.Require(t, "mbpoll", "mbpoll")
	p, err := profile.Parse("const", "const.yaml", []byte(`
model: const
data_type: Test
registers:
  - {name: A, area: holding, address: 0, emulate: {model: constant, min: 1234, max: 1234}}
  - {name: B, area: holding, address: 1, type: int16, emulate: {model: constant, min: -5, max: -5}}
`))
	if err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.New([]emulator.Device{{Slave: 7, Profile: p}}, emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(testtool.ServeLoopback(t, emu.ServeTCP))
	// mbpoll numbers registers from 1: -r 1 is address 0.
	out, err := exec.Command(mbpoll, "-m", "tcp", "-p", port, "-a", "7", "-r", "1", "-c", "2", "-t", "4", "-1", "127.0.0.1").CombinedOutput()
	if err != nil {
		t.Fatalf("mbpoll: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "[1]: \t1234") || !strings.Contains(string(out), "[2]: \t65531 (-5)") {
		t.Fatalf("mbpoll output:\n%s", out)
	}
}

func TestScanFindsSlaves(t *testing.T) {
	_, addr := serve(t, true, "generic-wind-speed", "generic-mine-methane", "generic-mine-oxygen")
	code, out, errOut := gw(t, "scan", "-url", "rtuovertcp://"+addr+"?baud=9600", "-slaves", "1-5", "-timeout", scanTimeout.String())
	if code != 0 {
		t.Fatalf("scan: %d %s", code, errOut)
	}
	for _, id := range []string{"found slave 1 ", "found slave 2 ", "found slave 3 "} {
		if !strings.Contains(out, id) {
			t.Fatalf("scan output lacks %q:\n%s", id, out)
		}
	}
	if strings.Contains(out, "found slave 4") || strings.Contains(out, "found slave 5") {
		t.Fatalf("phantom slaves:\n%s", out)
	}
	if !strings.Contains(errOut, fmt.Sprintf("trying 5 slave ids at 1 line setting: at most about %v to sweep", 6*scanTimeout)) || !strings.Contains(errOut, "Ctrl-C stops") {
		t.Fatalf("scan gives no estimate:\n%s", errOut)
	}

	// Stopped (Ctrl-C), it says where it was and what it found, not
	// "context canceled".
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o, e bytes.Buffer
	err := cmdScan(ctx, []string{"-url", "rtuovertcp://" + addr + "?baud=9600", "-slaves", "1-247"}, &o, &e)
	if !errors.Is(err, errSilent) || !strings.Contains(e.String(), "scan stopped at slave 1 of rtuovertcp://") || strings.Contains(e.String(), "context canceled") {
		t.Fatalf("stopped scan: %v\n%s", err, e.String())
	}
}

// On a serial line, scan finds the baud rate a device listens at.
func TestScanFindsBaudOnPty(t *testing.T) {
	a, b := testtool.PtyPair(t)
	set, _ := loadProfiles("")
	emu, err := emulator.New([]emulator.Device{{Slave: 4, Profile: set["generic-wind-speed"]}}, emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	port, err := emulator.OpenSerial(a, 19200, 'N', 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = emu.ServeRTU(ctx, port, 19200, 10) }()
	defer func() { cancel(); <-done; port.Close() }()
	code, out, errOut := gw(t, "scan", "-url", "rtu://"+b, "-slaves", "3-5", "-bauds", "19200", "-timeout", scanTimeout.String())
	if code != 0 || !strings.Contains(out, "found slave 4 ") || !strings.Contains(out, "19200 8N1") {
		t.Fatalf("scan: %d\n%s\n%s", code, out, errOut)
	}
}
