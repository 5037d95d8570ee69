//go:build fleet

package packaging_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/internal/updategate"
	"fieldlink/packet"
)

// TestFleet is make fleet-check: the .deb on a real systemd, in a Debian
// container booted by systemd-nspawn, then binary updates through Mender
// with the health gate. In order:
//
//  1. install: dpkg -i makes the user and the state directory and does not
//     start the service (the example site file names sensors that are not
//     there);
//  2. start: systemctl enable --now with a site file polling two emulated
//     anemometers on this host and delivering to a mosquitto on this host;
//     start returns once the gateway sent READY=1 (Type=notify);
//  3. hardening: systemd-analyze security's exposure score (logged), and
//     the sandbox in force on the running process;
//  4. journal: the gateway's log lines are journal entries with fields;
//  5. reload: systemctl reload applies a changed site file, same process;
//     a broken one is refused and the gateway goes on;
//  6. ota: Mender standalone with the fieldlink-deb module: 2.0.0 committed
//     with the network up (the gate wants deliveries); the network cut;
//     3.0.0, which cannot poll, rolled back to 2.0.0; 4.0.0 committed with
//     the network still down (network loss alone is no failure); the
//     network back: every packet buffered across the three updates
//     delivered, in one epoch, none missing; the site file as written;
//  7. remove keeps the buffer and the site file, purge deletes both.
//
// It needs root, systemd-container, debootstrap, mender-artifact and
// mosquitto; the Debian rootfs is built once by scripts/fleet-rootfs and
// cached outside the repository.
func TestFleet(t *testing.T) {
	began := time.Now()
	if os.Geteuid() != 0 {
		testtool.Unsupported(t, "root: systemd-nspawn boots a container and debootstrap builds its root")
	}
	nspawn := testtool.Require(t, "systemd-nspawn", "systemd-container")
	testtool.RequireSbin(t, "debootstrap", "debootstrap")
	nsenter := testtool.Require(t, "nsenter", "util-linux")
	testtool.Require(t, "mender-artifact", "mender-artifact")
	testtool.Require(t, "dpkg-deb", "dpkg")
	mosquittoBin := testtool.FindMosquitto(t)

	rootfs := fleetRootfs(t)
	built := buildFleetDebs(t)
	t.Logf("rootfs %s; packages and artifacts built after %s", rootfs, time.Since(began).Round(time.Second))

	// The peers, on this host: the container shares its network.
	_, emuAddr := emutest.Serve(t, false, "generic-wind-speed", "generic-wind-speed")
	broker := testtool.NewMosquitto(t, mosquittoBin)
	link := testtool.NewLink(t, broker.Addr()) // the network between the gateway and its broker, which stays up
	got := subscribe(t, broker.Addr())
	metricsAddr := testtool.FreeAddr(t)

	c := bootContainer(t, nspawn, nsenter, rootfs)
	for _, f := range built {
		copyFile(t, f, c.path("/root/fleet/"+filepath.Base(f)))
	}
	t.Logf("container %s up after %s", c.name, time.Since(began).Round(time.Second))

	site := fmt.Sprintf(`# fleet check
site: {id: "F1", id_field: FarmId}
gateway: {id: gw-fleet}
metrics: {listen: %q}
buses:
  - name: field
    url: tcp://%s
    timeout: 300ms
    devices:
      - {name: wind-1, profile: generic-wind-speed, slave: 1, interval: 500ms}
      - {name: wind-2, profile: generic-wind-speed, slave: 2, interval: 500ms}
uplink:
  probe: {interval: 500ms, timeout: 300ms}
  upstreams: [{url: "mqtt://%s"}]
`, metricsAddr, emuAddr, link.Addr())
	scrape := func() (updategate.Sample, error) { return updategate.Scrape(context.Background(), metricsAddr) }

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}

	step("install", func(t *testing.T) {
		c.must(t, "dpkg -i /root/fleet/fieldlink_1.0.0_"+debArch()+".deb")
		if out := c.must(t, "id fieldlink"); !strings.Contains(out, "(dialout)") {
			t.Errorf("the fieldlink user is not in dialout: %s", out)
		}
		if out, _ := c.sh("systemctl is-enabled fieldlink; systemctl is-active fieldlink"); out != "disabled\ninactive\n" {
			t.Errorf("a first install must not enable or start the service; systemctl says %q", out)
		}
		if out := c.must(t, "stat -c '%U:%G %a' /var/lib/fieldlink"); strings.TrimSpace(out) != "fieldlink:fieldlink 750" {
			t.Errorf("/var/lib/fieldlink is %s, want fieldlink:fieldlink 750", out)
		}
	})

	var mainPID string
	step("start", func(t *testing.T) {
		// systemd takes every line of the unit.
		if out, _ := c.sh("journalctl -b _PID=1 --no-pager | grep -i 'fieldlink.service:.*\\(unknown\\|ignoring\\|deprecated\\|not supported\\|invalid\\)'"); out != "" {
			t.Errorf("systemd complains about the unit:\n%s", out)
		}
		writeFile(t, c.path("/etc/fieldlink/site.yaml"), site)
		c.must(t, "fieldlink-gateway check -c /etc/fieldlink/site.yaml")
		// With Type=notify, start returns once READY=1 came: polling runs.
		c.must(t, "systemctl enable --now fieldlink")
		props := c.props(t, "Type", "ActiveState", "SubState", "MainPID", "NRestarts", "WatchdogUSec")
		if props["Type"] != "notify" || props["ActiveState"] != "active" || props["SubState"] != "running" || props["NRestarts"] != "0" {
			t.Fatalf("after systemctl start: %v\n%s", props, c.journal(t))
		}
		mainPID = props["MainPID"]
		s := waitSample(t, scrape, "both devices polled and a packet delivered", func(s updategate.Sample) bool {
			_, summary := updategate.Judge(s, nil, updategate.DefaultCriteria)
			return summary != "" && s.Delivered() > 0
		})
		t.Logf("running (MainPID %s, watchdog %s): %d devices, %d stored, %d delivered", mainPID, props["WatchdogUSec"], len(s.Devices), s.Appends, s.Delivered())
		if ts := c.props(t, "WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"]; ts == "" || ts == "0" {
			t.Errorf("systemd saw no WATCHDOG=1 (WatchdogTimestampMonotonic=%q)", ts)
		}
	})

	step("hardening", func(t *testing.T) {
		out, _ := c.sh("systemd-analyze security --no-pager fieldlink.service")
		m := regexp.MustCompile(`Overall exposure level for fieldlink.service: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("systemd-analyze security: no overall exposure level in\n%s", out)
		}
		score, _ := strconv.ParseFloat(m[1], 64)
		t.Logf("systemd-analyze security fieldlink.service: exposure %s %s", m[1], m[2])
		if score > maxExposure {
			t.Errorf("exposure %.1f, above %.1f: the unit lost hardening\n%s", score, maxExposure, out)
		}
		// In force on the running process, not just in the unit file.
		status := c.must(t, "cat /proc/"+mainPID+"/status")
		for _, want := range []string{"NoNewPrivs:\t1", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000"} {
			if !strings.Contains(status, want) {
				t.Errorf("the gateway's /proc status has no %q", want)
			}
		}
		in := func(script string) (string, error) {
			return c.sh("nsenter -t " + mainPID + " -m -- sh -c '" + script + "'")
		}
		if out, err := in("touch /usr/fleet-check"); err == nil || !strings.Contains(out, "Read-only file system") {
			t.Errorf("the gateway's view of /usr is writable (ProtectSystem=strict): %v %s", err, out)
		}
		if out, err := in("touch /var/lib/fieldlink/fleet-check && rm /var/lib/fieldlink/fleet-check"); err != nil {
			t.Errorf("the gateway's state directory is not writable: %v %s", err, out)
		}
		if out, err := in("ls -A /root"); err != nil || out != "" {
			t.Errorf("the gateway sees /root (ProtectHome=yes): %v %q", err, out)
		}
	})

	step("journal", func(t *testing.T) {
		var e map[string]any
		for _, line := range strings.Split(c.must(t, "journalctl -u fieldlink -o json --no-pager"), "\n") {
			var x map[string]any
			if json.Unmarshal([]byte(line), &x) == nil && x["MESSAGE"] == "gateway running" {
				e = x
			}
		}
		if e == nil {
			t.Fatalf("no journal entry whose MESSAGE is \"gateway running\":\n%s", c.journal(t))
		}
		for k, want := range map[string]string{"PRIORITY": "6", "GATEWAY": "gw-fleet", "DEVICES": "2", "SYSLOG_IDENTIFIER": "fieldlink-gateway"} {
			if e[k] != want {
				t.Errorf("journal entry field %s = %v, want %q (entry %v)", k, e[k], want, e)
			}
		}
	})

	step("reload", func(t *testing.T) {
		writeFile(t, c.path("/etc/fieldlink/site.yaml"), strings.Replace(site, "name: wind-2,", "name: wind-2b,", 1))
		c.must(t, "systemctl reload fieldlink")
		waitSample(t, scrape, "device wind-2b polled after the reload", func(s updategate.Sample) bool {
			return slices.ContainsFunc(s.Devices, func(d updategate.Device) bool { return d.Name == "wind-2b" && d.Answered() > 0 })
		})
		writeFile(t, c.path("/etc/fieldlink/site.yaml"), site+"not: [valid\n")
		c.must(t, "systemctl reload fieldlink")
		testtool.WaitFor(t, 30*time.Second, "the refusal in the journal", func() bool {
			return strings.Contains(c.journal(t), "site file refused; the running configuration stays in force")
		})
		writeFile(t, c.path("/etc/fieldlink/site.yaml"), site)
		c.must(t, "systemctl reload fieldlink")
		waitSample(t, scrape, "device wind-2 back after the last reload", func(s updategate.Sample) bool {
			return slices.ContainsFunc(s.Devices, func(d updategate.Device) bool { return d.Name == "wind-2" })
		})
		if p := c.props(t, "MainPID", "ActiveState"); p["MainPID"] != mainPID || p["ActiveState"] != "active" {
			t.Errorf("after three reloads: %v, want the same process (MainPID %s), active", p, mainPID)
		}
	})

	step("ota", func(t *testing.T) {
		// Provisioning: the installed package, to roll back to.
		c.must(t, "mkdir -p /var/lib/mender/fieldlink-deb && cp /root/fleet/fieldlink_1.0.0_"+debArch()+".deb /var/lib/mender/fieldlink-deb/installed.deb")
		writeFile(t, c.path("/etc/default/fieldlink-update"), "HEALTH_ARGS=\"-wait 30s\"\n")
		update := func(version string, commit bool, why string) string {
			t.Helper()
			c.must(t, "mender install /root/fleet/fieldlink-"+version+"-"+debArch()+".mender")
			out, err := c.sh("mender commit")
			if commit && err != nil {
				t.Fatalf("%s: mender commit failed: %v\n%s\n%s", version, err, out, c.journal(t))
			}
			if !commit && err == nil {
				t.Fatalf("%s: mender commit succeeded, want a rollback:\n%s", version, out)
			}
			if !strings.Contains(out, why) {
				t.Errorf("%s: the updater's log does not say %q:\n%s", version, why, out)
			}
			verdict := regexp.MustCompile(`(un)?healthy after [^"]*`).FindString(out)
			t.Logf("update to %s: committed %v: %s", version, err == nil, verdict)
			if t.Failed() {
				t.Logf("mender commit of %s:\n%s", version, gateLines(out))
			}
			return out
		}
		installed := func(want string) {
			t.Helper()
			v := strings.TrimSpace(c.must(t, "dpkg-query -W -f='${Version}' fieldlink"))
			a := strings.TrimSpace(c.must(t, "mender show-artifact 2>/dev/null"))
			p := c.props(t, "ActiveState", "SubState")
			art := "fieldlink-" + want
			if want == "1.0.0" {
				art = "provisioned" // installed by hand, before Mender
			}
			if v != want || a != art || p["SubState"] != "running" {
				t.Fatalf("installed %s, Mender's artifact %s, service %v; want %s running", v, a, p, want)
			}
		}

		if out, err := c.sh("mender install /root/fleet/fieldlink-2.0.0-" + debArch() + "-unsigned.mender"); err == nil || !strings.Contains(out, "signed") {
			t.Fatalf("an unsigned artifact was not refused for want of a signature: %v\n%s", err, out)
		}
		installed("1.0.0")
		update("2.0.0", true, "delivered")
		installed("2.0.0")

		link.Set(false)
		waitSample(t, scrape, "the upstream seen down and packets queued", func(s updategate.Sample) bool {
			return len(s.Reachable()) == 0 && s.Queued > 5
		})
		out := update("3.0.0", false, "0 of 2 devices answered since the daemon started")
		if !strings.Contains(out, "rolling back to 2.0.0") {
			t.Errorf("the module did not say it rolled back to 2.0.0:\n%s", out)
		}
		installed("2.0.0")

		update("4.0.0", true, "no upstream was reachable before the update: not required")
		installed("4.0.0")

		// 5.0.0 writes a buffer format 4.0.0 does not read: refused
		// before anything is installed.
		out, err := c.sh("mender install /root/fleet/fieldlink-5.0.0-" + debArch() + ".mender")
		if err == nil || !strings.Contains(out, "a rollback to fieldlink 4.0.0 would strand packets") {
			t.Fatalf("5.0.0 was not refused: %v\n%s", err, out)
		}
		t.Logf("update to 5.0.0: refused: %s", regexp.MustCompile(`a rollback to fieldlink[^"]*`).FindString(out))
		installed("4.0.0")
		if s, err := scrape(); err != nil || s.Queued == 0 {
			t.Fatalf("with the network down, nothing queued after three updates: %+v %v", s, err)
		}

		// The conffile as written, no dpkg copies beside it.
		if b, _ := os.ReadFile(c.path("/etc/fieldlink/site.yaml")); string(b) != site {
			t.Errorf("the site file changed across the updates:\n%s", b)
		}
		if m, _ := filepath.Glob(c.path("/etc/fieldlink/site.yaml.dpkg-*")); len(m) > 0 {
			t.Errorf("dpkg left %v", m)
		}

		link.Set(true)
		waitSample(t, scrape, "the buffer drained", func(s updategate.Sample) bool {
			return len(s.Reachable()) > 0 && s.Queued == 0
		})
		c.must(t, "systemctl stop fieldlink")
		stats := c.must(t, "fieldlink-gateway buffer stats -c /etc/fieldlink/site.yaml")
		last := regexp.MustCompile(`(?m)^last seq\s+(\d+)`).FindStringSubmatch(stats)
		depth := regexp.MustCompile(`(?m)^depth\s+(\d+)`).FindStringSubmatch(stats)
		if last == nil || depth == nil || depth[1] != "0" {
			t.Fatalf("buffer stats after the drain:\n%s", stats)
		}
		lastSeq, _ := strconv.ParseUint(last[1], 10, 64)
		epochs, missing, dups := got.check(lastSeq)
		t.Logf("received seqs 1..%d in epochs %v: %d missing, %d duplicates", lastSeq, epochs, len(missing), dups)
		if len(epochs) != 1 {
			t.Errorf("packets in %d epochs %v: the buffer was not kept across the updates", len(epochs), epochs)
		}
		if len(missing) > 0 {
			t.Errorf("%d of %d packets never delivered: %v", len(missing), lastSeq, head(missing, 20))
		}
		c.must(t, "systemctl start fieldlink")
	})

	step("remove and purge", func(t *testing.T) {
		c.must(t, "dpkg -r fieldlink")
		if out, _ := c.sh("systemctl is-active fieldlink"); strings.TrimSpace(out) == "active" {
			t.Errorf("still running after dpkg -r")
		}
		for _, p := range []string{"/var/lib/fieldlink/buffer.db", "/etc/fieldlink/site.yaml"} {
			if _, err := os.Stat(c.path(p)); err != nil {
				t.Errorf("dpkg -r removed %s: %v", p, err)
			}
		}
		if _, err := os.Stat(c.path("/usr/bin/fieldlink-gateway")); err == nil {
			t.Error("dpkg -r left the binary")
		}
		c.must(t, "dpkg -P fieldlink")
		for _, p := range []string{"/var/lib/fieldlink", "/etc/fieldlink"} {
			if _, err := os.Stat(c.path(p)); err == nil {
				t.Errorf("dpkg -P left %s", p)
			}
		}
	})
	t.Logf("fleet check done in %s", time.Since(began).Round(time.Second))
}

// maxExposure is the highest systemd-analyze security exposure the unit may
// score (0 best, 10 worst) under the Debian release the check boots.
const maxExposure = 3.0

// debArch is the Debian architecture of this host, whose packages the
// container runs.
func debArch() string {
	if runtime.GOARCH == "arm" {
		return "armhf"
	}
	return runtime.GOARCH
}

// fleetRootfs returns the cached Debian rootfs, building it if needed.
func fleetRootfs(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("../scripts/fleet-rootfs")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/fleet-rootfs: %v\n%s", err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out))
}

// buildFleetDebs builds the packages of versions 1.0.0 to 5.0.0 and the
// Mender artifacts of the last four. 3.0.0 is a version that cannot poll:
// built with the anemometer's profile reading register 0x100, which the
// devices do not have. 5.0.0 says it writes a buffer record format that no
// version reads (a future format change shipped too early).
func buildFleetDebs(t *testing.T) []string {
	t.Helper()
	dist := t.TempDir()
	bin := t.TempDir()
	run := func(env []string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run([]string{"GOBIN=" + bin, "GOFLAGS="}, "go", "install", "github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.41.1")

	profile, err := os.ReadFile("../firmware-profiles/generic-wind-speed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	broken := bytes.Replace(profile, []byte("address: 0x0000"), []byte("address: 0x0100"), 1)
	if bytes.Equal(broken, profile) {
		t.Fatal("generic-wind-speed.yaml has no \"address: 0x0000\" to break for the version that cannot poll")
	}
	overlay := filepath.Join(bin, "overlay.json")
	abs, _ := filepath.Abs("../firmware-profiles/generic-wind-speed.yaml")
	writeFile(t, filepath.Join(bin, "broken.yaml"), string(broken))
	o, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: filepath.Join(bin, "broken.yaml")}})
	writeFile(t, overlay, string(o))

	// 5.0.0 writes (says it writes) record format 2, which no version reads.
	formats, err := os.ReadFile("../buffer/formats.go")
	if err != nil {
		t.Fatal(err)
	}
	newer := bytes.Replace(formats, []byte("func WriteFormats() Formats { return ReadFormats() }"),
		[]byte("func WriteFormats() Formats { f := ReadFormats(); f.Record = append(f.Record, 2); return f }"), 1)
	if bytes.Equal(newer, formats) {
		t.Fatal("buffer/formats.go has no WriteFormats to change for the version whose buffer the others cannot read")
	}
	overlay5 := filepath.Join(bin, "overlay5.json")
	abs5, _ := filepath.Abs("../buffer/formats.go")
	writeFile(t, filepath.Join(bin, "formats.go"), string(newer))
	o5, _ := json.Marshal(map[string]map[string]string{"Replace": {abs5: filepath.Join(bin, "formats.go")}})
	writeFile(t, overlay5, string(o5))

	// Artifacts are signed; the devices take only those (ArtifactVerifyKey).
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key)
	signKey := filepath.Join(bin, "artifact.key")
	writeFile(t, signKey, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})))
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	verifyKey := filepath.Join(dist, "artifact-verify-key.pem")
	writeFile(t, verifyKey, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})))
	out := []string{verifyKey}

	for _, v := range []string{"1.0.0", "2.0.0", "3.0.0", "4.0.0", "5.0.0"} {
		args := []string{"build", "-trimpath", "-tags", "field,nethttpomithttp2", "-ldflags", "-s -w -X main.version=" + v,
			"-o", filepath.Join(dist, "fieldlink-gateway_"+v+"_linux_"+debTarget()), "./cmd/gateway"}
		switch v {
		case "3.0.0":
			args = append(args[:1], append([]string{"-overlay", overlay}, args[1:]...)...)
		case "5.0.0":
			args = append(args[:1], append([]string{"-overlay", overlay5}, args[1:]...)...)
		}
		run([]string{"CGO_ENABLED=0"}, "go", args...)
		run([]string{"VERSION=" + v, "DIST=" + dist, "ARCHES=" + debArch(), "NFPM=" + filepath.Join(bin, "nfpm")}, "packaging/build-debs")
		deb := filepath.Join(dist, "fieldlink_"+v+"_"+debArch()+".deb")
		out = append(out, deb)
		if v != "1.0.0" {
			art := filepath.Join(dist, "fieldlink-"+v+"-"+debArch()+".mender")
			run(nil, "packaging/mender/make-artifact", "-t", "fleet-check", "-k", signKey, "-o", art, deb)
			out = append(out, art)
		}
		if v == "2.0.0" {
			art := filepath.Join(dist, "fieldlink-"+v+"-"+debArch()+"-unsigned.mender")
			run(nil, "packaging/mender/make-artifact", "-t", "fleet-check", "-o", art, deb)
			out = append(out, art)
		}
	}
	return out
}

// gateLines returns the lines of an updater's output that the module and
// the health gate wrote.
func gateLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "fieldlink-deb:") || strings.Contains(l, "health") || strings.Contains(l, "rollback to fieldlink") ||
			strings.HasPrefix(l, "recorded in") || strings.HasPrefix(l, "unhealthy") || strings.HasPrefix(l, "baseline") {
			keep = append(keep, "    "+l)
		}
	}
	return strings.Join(keep, "\n")
}

// debTarget is the cross-build target name of debArch's binary.
func debTarget() string {
	if runtime.GOARCH == "arm" {
		return "armv6"
	}
	return runtime.GOARCH
}

// container is a Debian system booted by systemd-nspawn from a copy of the
// cached rootfs. It shares this host's network.
type container struct {
	name    string
	root    string // its root directory, on this host
	nsenter string
	leader  int // its PID 1, as this host sees it
	cmd     *exec.Cmd
	exited  chan struct{}
	console *testtool.SyncBuffer
}

func bootContainer(t *testing.T, nspawn, nsenter, rootfs string) *container {
	t.Helper()
	nspawnRunTmpfs(t)
	c := &container{
		name:    fmt.Sprintf("fleet-%d", os.Getpid()),
		root:    filepath.Join(t.TempDir(), "root"),
		nsenter: nsenter,
		exited:  make(chan struct{}),
		console: &testtool.SyncBuffer{},
	}
	if out, err := exec.Command("cp", "-a", "--reflink=auto", rootfs, c.root).CombinedOutput(); err != nil {
		t.Fatalf("copy the rootfs: %v\n%s", err, out)
	}
	// Mender standalone on a device of type fleet-check.
	writeFile(t, c.path("/etc/mender/mender.conf"), `{"ArtifactVerifyKey": "/root/fleet/artifact-verify-key.pem"}`+"\n")
	writeFile(t, c.path("/data/mender/device_type"), "device_type=fleet-check\n")
	writeFile(t, c.path("/etc/mender/artifact_info"), "artifact_name=provisioned\n")

	// --register=no and --keep-unit: this host's init may not be systemd,
	// and without machined or a system bus nspawn cannot register the
	// machine or make a scope for it.
	c.cmd = exec.Command(nspawn, "--quiet", "-D", c.root, "-M", c.name, "--register=no", "--keep-unit", "-b", "--console=pipe")
	c.cmd.Stdout, c.cmd.Stderr = c.console, c.console
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() { c.shutdown(t) })

	pid := c.cmd.Process.Pid
	deadline := time.Now().Add(60 * time.Second)
	for c.leader == 0 {
		select {
		case <-c.exited:
			t.Fatalf("systemd-nspawn exited: %v\n%s", c.cmd.ProcessState, c.console)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd-nspawn started no init within 60s:\n%s", c.console)
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); len(f) > 0 {
			comm, _ := os.ReadFile("/proc/" + f[0] + "/comm")
			if strings.TrimSpace(string(comm)) == "systemd" {
				c.leader, _ = strconv.Atoi(f[0])
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out string
	var err error
	for {
		// Until PID 1 has its private socket, systemctl cannot reach it.
		out, err = c.shCtx(ctx, "systemctl is-system-running --wait")
		if !strings.Contains(out, "Failed to connect to bus") || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if state := strings.TrimSpace(out); err != nil && state != "degraded" || state != "running" && state != "degraded" {
		t.Fatalf("the container's systemd is %q (%v)\n%s", out, err, c.console)
	}
	if strings.TrimSpace(out) == "degraded" {
		failed, _ := c.sh("systemctl --failed --no-legend")
		t.Logf("the container booted degraded; failed units:\n%s", failed)
	}
	return c
}

// nspawnRunTmpfs makes /run/systemd/nspawn a tmpfs when /run is not one:
// nspawn keeps a directory per machine there and, on a disk file system,
// refuses to remove it and exits ("Attempted to remove disk file system
// under \"/run/systemd/nspawn/propagate/...\", and we can't allow that").
func nspawnRunTmpfs(t *testing.T) {
	t.Helper()
	const tmpfsMagic = 0x01021994
	var st syscall.Statfs_t
	if err := syscall.Statfs("/run", &st); err == nil && st.Type == tmpfsMagic {
		return
	}
	dir := "/run/systemd/nspawn"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Statfs(dir, &st); err == nil && st.Type == tmpfsMagic {
		return
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
		testtool.Unsupported(t, fmt.Sprintf("/run is not a tmpfs and a tmpfs cannot be mounted on %s for systemd-nspawn: %v", dir, err))
	}
	t.Logf("/run is not a tmpfs here: mounted one on %s for systemd-nspawn", dir)
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// shutdown powers the container off, or ends systemd-nspawn.
func (c *container) shutdown(t *testing.T) {
	if t.Failed() {
		t.Logf("container console:\n%s", c.console)
	}
	_, _ = c.sh("systemctl poweroff --no-block")
	select {
	case <-c.exited:
		return
	case <-time.After(60 * time.Second):
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// path is p inside the container, as this host sees it.
func (c *container) path(p string) string { return filepath.Join(c.root, p) }

// sh runs script with /bin/sh in the container and returns its output,
// stdout and stderr together.
func (c *container) sh(script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return c.shCtx(ctx, script)
}

func (c *container) shCtx(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, c.nsenter, "-t", strconv.Itoa(c.leader), "-a", "--", "/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must is sh that fails the test on an error.
func (c *container) must(t *testing.T, script string) string {
	t.Helper()
	out, err := c.sh(script)
	if err != nil {
		t.Fatalf("in the container, %s: %v\n%s\nthe gateway's journal:\n%s", script, err, out, c.journal(t))
	}
	return out
}

// props returns systemctl show's properties of the fieldlink unit.
func (c *container) props(t *testing.T, names ...string) map[string]string {
	t.Helper()
	out := c.must(t, "systemctl show fieldlink -p "+strings.Join(names, ","))
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// journal returns the gateway's journal, short form.
func (c *container) journal(t *testing.T) string {
	t.Helper()
	out, _ := c.sh("journalctl -u fieldlink --no-pager -o short-precise; journalctl --no-pager -o short-precise _PID=1 | tail -30")
	return out
}

// waitSample scrapes the container's gateway until cond holds (a minute at
// most) and returns that sample.
func waitSample(t *testing.T, scrape func() (updategate.Sample, error), what string, cond func(updategate.Sample) bool) updategate.Sample {
	t.Helper()
	var s updategate.Sample
	var err error
	if !testtool.Eventually(time.Minute, 250*time.Millisecond, func() bool {
		s, err = scrape()
		return err == nil && cond(s)
	}) {
		t.Fatalf("waited a minute for %s; last scrape %+v %v", what, s, err)
	}
	return s
}

// received is every packet the subscriber got: count by epoch and seq.
type received struct {
	mu  sync.Mutex
	got map[string]map[uint64]int
	bad []string
}

// subscribe takes every packet the broker at addr forwards.
func subscribe(t *testing.T, addr string) *received {
	t.Helper()
	r := &received{got: map[string]map[uint64]int{}}
	brokertest.Subscribe(t, brokertest.Options{ID: "fleet-check", Brokers: []string{addr}, Reconnect: true, Quiesce: 100},
		"fieldlink/#", func(_ string, payload []byte) {
			r.mu.Lock()
			defer r.mu.Unlock()
			p, err := packet.Decode(payload)
			if err != nil {
				r.bad = append(r.bad, fmt.Sprintf("%s: %v", payload, err))
				return
			}
			if r.got[p.Epoch] == nil {
				r.got[p.Epoch] = map[uint64]int{}
			}
			r.got[p.Epoch][p.Seq]++
		})
	return r
}

// check returns the epochs seen, the seqs from 1 to last never received,
// and how many were received more than once.
func (r *received) check(last uint64) (epochs []string, missing []uint64, dups int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[uint64]int{}
	for e, m := range r.got {
		epochs = append(epochs, e)
		for s, n := range m {
			seen[s] += n
		}
	}
	for s := uint64(1); s <= last; s++ {
		switch n := seen[s]; {
		case n == 0:
			missing = append(missing, s)
		case n > 1:
			dups++
		}
	}
	return epochs, missing, dups
}

func head(s []uint64, n int) []uint64 { return s[:min(n, len(s))] }

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	write(t, name, []byte(content), 0o644)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	write(t, to, readFile(t, from), 0o644)
}
