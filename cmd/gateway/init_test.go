package main

import (
	"context"
	"fieldlink/config"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

func TestInitWritesStartersThatCheck(t *testing.T) {
	for _, kind := range []string{"farm", "mine"} {
		file := filepath.Join(t.TempDir(), kind+".yaml")
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file); code != 0 {
			t.Fatalf("init %s: %s", kind, errOut)
		}
		code, out, errOut := gw(t, "check", "-c", file)
		if code != 0 || !strings.Contains(out, "ok:") || errOut != "" {
			t.Fatalf("check %s must pass without a warning: %d\n%s\n%s", kind, code, out, errOut)
		}
		c, err := config.Load(file, loadProfiles)
		if err != nil || c.Uplink == nil || c.Buffer.Path != config.DefaultBufferPath || c.Metrics.Listen == "off" {
			t.Fatalf("the %s starter must run as it is (an uplink, the buffer, the status page): %v %+v", kind, err, c)
		}
		// Not overwritten without asking; no terminal to ask on is a no.
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file); code == 0 || !strings.Contains(errOut, "not overwritten") {
			t.Fatalf("init must not overwrite: %s", errOut)
		}
		if code, _, errOut := gw(t, "init", "--kind", kind, "-o", file, "-force"); code != 0 {
			t.Fatalf("init -force: %s", errOut)
		}
	}
	if code, _, errOut := gw(t, "init", "--kind", "factory"); code == 0 || !strings.Contains(errOut, "valid: farm, mine") {
		t.Fatalf("init bad kind: %s", errOut)
	}
	// Written to site.yaml unless told otherwise; "-o -" prints it.
	t.Chdir(t.TempDir())
	if code, _, errOut := gw(t, "init"); code != 0 || !strings.Contains(errOut, "wrote site.yaml") {
		t.Fatalf("init: %d %s", code, errOut)
	}
	if code, out, _ := gw(t, "init", "-o", "-"); code != 0 || !strings.HasPrefix(out, "# fieldlink site file for a farm") {
		t.Fatalf("init -o -: %d %s", code, out)
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
