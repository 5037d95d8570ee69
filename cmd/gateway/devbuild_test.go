//go:build !field

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/config"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// The tests of the commands only the development build runs (emulate,
// delphi, and what needs the emulator); the field build says those commands
// are not in it (field_test.go).

func TestEmulateRefusesNonLoopback(t *testing.T) {
	code, _, errOut := gw(t, "emulate", "--profile", "generic-wind-speed", "--listen", "tcp://0.0.0.0:0")
	if code != 1 || !strings.Contains(errOut, "not a loopback address") {
		t.Fatalf("%d %s", code, errOut)
	}
}

// gateway emulate on one end of a pty pair answers gateway read on the other.
func TestEmulateServesASerialLine(t *testing.T) {
	a, b := testtool.PtyPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	var errb testtool.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- cmdEmulate(ctx, []string{"--profile", "generic-mine-methane@5", "--serial", a, "--baud", "19200", "--parity", "E", "--log-level", "warn"}, &bytes.Buffer{}, &errb)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("emulate: %v", err)
		}
	}()
	testtool.WaitFor(t, 5*time.Second, "the emulator to open its port", func() bool {
		return strings.Contains(errb.String(), "serving RTU")
	})
	code, out, errOut := gw(t, "read", "-url", "rtu://"+b+"?baud=19200&parity=E", "-slave", "5", "-address", "0")
	if code != 0 || !strings.HasPrefix(out, "[0]: ") {
		t.Fatalf("read: %d %q %s", code, out, errOut)
	}
	code, _, errOut = gw(t, "read", "-url", "rtu://"+b+"?baud=19200&parity=E", "-slave", "6", "-timeout", "100ms")
	if code != 1 || !strings.Contains(errOut, "slave 6") {
		t.Fatalf("absent slave: %d %s", code, errOut)
	}
}

// A fresh starter, as init writes it for a port and a broker, runs as it
// is: every device of its line, served by the emulator on a serial pty,
// reaches a real mosquitto.
func TestInitStarterRunsAsItIs(t *testing.T) {
	broker := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	port, line := testtool.PtyPair(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "site.yaml")
	if code, _, errOut := gw(t, "init", "--kind", "farm", "-port", port, "-broker", broker.URL(), "-buffer", "buffer.db", "-listen", "off", "-o", file); code != 0 {
		t.Fatalf("init: %s", errOut)
	}
	if code, _, errOut := gw(t, "check", file); code != 0 || errOut != "" {
		t.Fatalf("check: %d %s", code, errOut)
	}
	c, err := config.Load(file, loadProfiles)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--serial", line, "--baud", "4800", "--log-level", "warn"}
	want := map[string]bool{}
	for _, d := range c.Buses[0].Devices {
		args = append(args, "--profile", fmt.Sprintf("%s@%d", d.Profile, d.Slave))
		want[d.Name] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	var emuLog testtool.SyncBuffer
	emuDone := make(chan error, 1)
	go func() { emuDone <- cmdEmulate(ctx, args, io.Discard, &emuLog) }()
	defer func() { cancel(); <-emuDone }()
	testtool.WaitFor(t, 5*time.Second, "the emulator to open its port", func() bool {
		return strings.Contains(emuLog.String(), "serving RTU")
	})
	var mu sync.Mutex
	got := map[string]bool{}
	e2eSubscribe(t, broker.Addr(), "init", func(topic string, payload []byte) {
		if !strings.HasSuffix(topic, "/status") {
			testtool.ValidPacket(t, payload)
		}
		if p, err := packet.Decode(payload); err == nil {
			mu.Lock()
			got[p.DeviceID] = true
			mu.Unlock()
		}
	}, func(s string) { t.Error(s) })
	e2eStartGateway(t, file, io.Discard, "warn")
	testtool.WaitFor(t, 30*time.Second, "a packet of every device at the broker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	})
}

// gateway delphi turns expert estimates into a drf section the site file
// accepts, and says which check failed.
func TestDelphiWritesASiteSection(t *testing.T) {
	code, out, errOut := gw(t, "delphi", "-i", "testdata/experts.csv")
	if code != 0 || !strings.Contains(out, "selector: drf") || !strings.Contains(out, "in_flight: 61.3333") {
		t.Fatalf("delphi: %d\n%s\n%s", code, out, errOut)
	}
	_, addr := serve(t, false, "generic-mine-methane")
	site := writeSite(t, fmt.Sprintf(`site: {id: "M1", id_field: MineId}
gateway: {id: gw-d}
buses:
  - name: b
    url: tcp://%s
    devices: [{name: ch4-1, profile: generic-mine-methane, slave: 1}]
%s  upstreams: [{url: "http://127.0.0.1:1/ingest"}]
`, addr, out[strings.Index(out, "uplink:"):]))
	if code, _, errOut := gw(t, "check", "-c", site); code != 0 {
		t.Fatalf("the site file does not take delphi's output: %s", errOut)
	}
	code, _, errOut = gw(t, "delphi", "-i", "testdata/experts.csv", "-asked", "3")
	if code != 1 || !strings.Contains(errOut, "response rate 2/3") {
		t.Fatalf("delphi with 3 asked: %d %s", code, errOut)
	}
}
