package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors/emulator"
)

// gw runs the gateway's command line in-process.
func gw(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = realMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageAndVersion(t *testing.T) {
	if code, out, _ := gw(t, "help"); code != 0 || strings.Contains(out, "gateway demo") == fieldBuild || !strings.Contains(out, "gateway poll") {
		t.Fatalf("help (field build: %v): %d %s", fieldBuild, code, out)
	}
	if fieldBuild {
		if code, _, errOut := gw(t, "demo"); code != 1 || !strings.Contains(errOut, "not in this build") {
			t.Fatalf("demo in the field build: %d %s", code, errOut)
		}
	}
	if code, out, _ := gw(t, "version"); code != 0 || !strings.HasPrefix(out, "fieldlink gateway ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, errOut := gw(t, "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %d %s", code, errOut)
	}
}

func TestCheckListsEveryErrorWithLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "site.yaml")
	src := `site: {id: "001", id_field: FarmID}
gateway: {id: gw-01}
buses:
  - name: a
    url: rtu:///dev/ttyUSB0?baud=fast
    devices:
      - {name: w, profile: generic-wind-speed, slave: 0, intervl: 5s}
`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := gw(t, "check", "-c", file)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{
		file + ":1:29: site.id_field: must be FarmId or MineId",
		file + ":5:10: buses[0].url:",
		file + ":7:58: buses[0].devices[0].intervl: unknown field",
		file + ":7:55: buses[0].devices[0].slave: must be 1..247",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check output lacks %q:\n%s", want, errOut)
		}
	}
}

// serve starts the emulator with the named profiles as slaves 1, 2, ...
func serve(t *testing.T, rtu bool, names ...string) (*emulator.Emulator, string) {
	return emutest.Serve(t, rtu, names...)
}

// mineSite is the tests' mine: one methane sensor, slave 1, on the bus at
// busAddr, its packets stored in buffer and delivered to the upstream (an
// upstream's YAML as a flow list takes it).
func mineSite(buffer, busAddr, upstream string) testtool.SiteFile {
	return testtool.SiteFile{
		Site: `{id: "M1", id_field: MineId}`, Gateway: "gw-b", Buffer: buffer, Bus: "tcp://" + busAddr,
		Devices: []string{"{name: ch4-1, profile: generic-mine-methane, slave: 1}"},
		Uplink:  []string{"upstreams: [" + upstream + "]"},
	}
}

func writeSite(t *testing.T, src string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestPollPrintsOnePacketPerDevice(t *testing.T) {
	_, addr := serve(t, true, "generic-mine-methane", "generic-mine-oxygen", "renke-rs-ws-n01")
	file := writeSite(t, fmt.Sprintf(`site: {id: "M7", id_field: MineId, timezone: Asia/Shanghai}
gateway: {id: gw-9}
packet: {values: number}
buses:
  - name: face
    url: rtuovertcp://%s?baud=9600
    timeout: 200ms
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1}
      - {name: o2-1,  profile: generic-mine-oxygen,  slave: 2}
      - {name: th-1,  profile: renke-rs-ws-n01,      slave: 3}
`, addr))
	code, out, errOut := gw(t, "poll", "-c", file)
	if code != 0 {
		t.Fatalf("poll: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	seen := map[string]bool{}
	epochs := map[string]bool{}
	for _, l := range lines {
		testtool.ValidPacket(t, []byte(l))
		p, err := packet.Decode([]byte(l))
		if err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		seen[p.DeviceID] = true
		if p.SiteID != "M7" || p.IDField != "MineId" || p.GatewayID != "gw-9" || p.Seq == 0 {
			t.Fatalf("head: %s", l)
		}
		// Its own epoch, so that (GatewayId, Epoch, Seq) never names a
		// packet of the running gateway, which numbers from 1 too.
		if !strings.HasPrefix(p.Epoch, "poll-") {
			t.Fatalf("a poll packet without an epoch of its own: %s", l)
		}
		epochs[p.Epoch] = true
		if !strings.Contains(l, `"DataBody":{"`) || strings.Contains(l, `":"0.`) {
			t.Fatalf("number mode should print bare numbers: %s", l)
		}
	}
	if !seen["ch4-1"] || !seen["o2-1"] || !seen["th-1"] {
		t.Fatalf("devices %v", seen)
	}
	if len(epochs) != 1 {
		t.Errorf("one poll, %d epochs: %v", len(epochs), epochs)
	}
	_, again, _ := gw(t, "poll", "-c", file)
	if p, err := packet.Decode([]byte(strings.SplitN(again, "\n", 2)[0])); err != nil || epochs[p.Epoch] {
		t.Errorf("a second poll reuses the first one's epoch (%v): %s", err, again)
	}

	// A device that does not answer: the others still print, the exit code
	// says something failed, stderr names the device.
	file = writeSite(t, strings.Replace(mustRead(t, file), "slave: 3}", "slave: 9}", 1))
	code, out, errOut = gw(t, "poll", "-c", file)
	if code != 1 || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "device th-1 (slave 9 on bus face)") {
		t.Fatalf("dead device: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	// Said once, with what to check.
	if strings.Count(errOut, "th-1") != 1 || !strings.Contains(errOut, "hint: check the wiring") {
		t.Fatalf("the failure must be printed once, with a hint:\n%s", errOut)
	}
}

func mustRead(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDemoPrintsFarmAndMinePackets(t *testing.T) {
	if fieldBuild {
		t.Skip("the field build (-tags field) has no demo; TestUsageAndVersion checks it says so")
	}
	code, out, errOut := gw(t, "demo", "-duration", "2500ms")
	if code != 0 {
		t.Fatalf("demo: %d %s", code, errOut)
	}
	var farm, mine int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		testtool.ValidPacket(t, []byte(l))
		p, err := packet.Decode([]byte(l))
		if err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		switch p.IDField {
		case "FarmId":
			farm++
		case "MineId":
			mine++
		}
	}
	if farm < 6 || mine < 5 {
		t.Fatalf("farm %d, mine %d packets\n%s", farm, mine, errOut)
	}
	if !strings.Contains(errOut, "HEALTH") || !strings.Contains(errOut, "ch4-1") {
		t.Fatalf("no summary:\n%s", errOut)
	}
}

// A near miss of a command's name is answered with the command meant.
func TestUnknownCommandSuggests(t *testing.T) {
	code, _, errOut := gw(t, "chek")
	if code != 2 || !strings.Contains(errOut, `unknown command "chek" (did you mean "check"?)`) {
		t.Fatalf("chek: %d %s", code, errOut)
	}
}

// A site file given without -c is understood, by every command that takes
// one, with flags before or after it.
func TestSiteFileWithoutDashC(t *testing.T) {
	file := filepath.Join(t.TempDir(), "farm.yaml")
	if code, _, errOut := gw(t, "init", "--kind", "farm", "-o", file); code != 0 {
		t.Fatalf("init: %s", errOut)
	}
	code, out, errOut := gw(t, "check", file)
	if code != 0 || !strings.Contains(out, "ok:") {
		t.Fatalf("check FILE: %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := gw(t, "check", "-c", file, "other.yaml"); code != 2 || !strings.Contains(errOut, `unexpected argument "other.yaml"`) {
		t.Fatalf("check -c FILE other.yaml must be refused: %d %s", code, errOut)
	}
}

// A binary built from a clone without -ldflags names its commit from the
// build's own record of it.
func TestVersionFromBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0d34e96b1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := versionLine("dev", "unknown", info), "fieldlink gateway dev (commit 0d34e96b1e2f, modified)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got, want := versionLine("1.4.0", "abc1234", info), "fieldlink gateway 1.4.0 (commit abc1234)"; got != want {
		t.Fatalf("a stamped commit wins: got %q, want %q", got, want)
	}
	if got, want := versionLine("dev", "unknown", nil), "fieldlink gateway dev (commit unknown)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Counts read as English: "1 register in 1 request", "1 bus"; a profile's
// maker is not said twice.
func TestCountsAndMakersReadWell(t *testing.T) {
	code, out, errOut := gw(t, "profiles")
	if code != 0 || strings.Contains(out, "generic generic") || !strings.Contains(out, "1 register ") {
		t.Fatalf("profiles: %d\n%s\n%s", code, out, errOut)
	}
}
