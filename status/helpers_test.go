package status_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
)

func profiles(string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, "") }

// emu is the project's emulator serving Modbus TCP on a loopback port that
// a test can stop (the port closes, connections are cut) and start again
// at the same address.
type emu struct {
	t      testing.TB
	e      *emulator.Emulator
	addr   string
	cancel context.CancelFunc
	done   chan error
}

// newEmu serves the named embedded profiles as slaves 1, 2, … until the
// test ends.
func newEmu(t testing.TB, names ...string) *emu {
	t.Helper()
	set, err := profiles("")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := emulator.Slaves(set, names...)
	if err != nil {
		t.Fatal(err)
	}
	e, err := emulator.New(devs, emulator.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := &emu{t: t, e: e, addr: "127.0.0.1:0"}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *emu) start() {
	m.t.Helper()
	var ln net.Listener
	var err error
	// The port was ours a moment ago; another test's listener may take it
	// in between, which this waits out rather than fail.
	for range 100 {
		if ln, err = net.Listen("tcp", m.addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		m.t.Fatalf("emulator: listen %s again: %v", m.addr, err)
	}
	m.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan error, 1)
	go func() { m.done <- m.e.ServeTCP(ctx, ln) }()
}

func (m *emu) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	if err := <-m.done; err != nil {
		m.t.Errorf("emulator: %v", err)
	}
	m.cancel = nil
}

// writeSite writes a site file (its buffer beside it) from text, where
// {{DIR}} stands for its directory, and loads it.
func writeSite(t testing.TB, text string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(text, "{{DIR}}", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(file, profiles)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// twoBuses is a site of two buses, a methane sensor on a and an anemometer
// on b, polled every 100 ms and retried at least every second, delivering
// to the HTTP upstream at ingest.
func twoBuses(a, b, ingest, metrics string) string {
	return fmt.Sprintf(`site: {id: "M9", id_field: MineId}
gateway: {id: gw-status}
buffer: {path: buf.db}
metrics: {listen: %q}
buses:
  - name: a
    url: tcp://%s
    backoff: 1s
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}
  - name: b
    url: tcp://%s
    timeout: 200ms
    backoff: 1s
    devices:
      - {name: wind-1, profile: generic-wind-speed, slave: 1, interval: 100ms}
uplink:
  probe: {interval: 500ms, timeout: 400ms}
  upstreams:
    - url: %s/ingest
`, metrics, a, b, ingest)
}
