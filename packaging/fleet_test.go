//go:build fleet

package packaging_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/updategate"
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
	var metricsAddr, site string // the port chosen at the start below

	c := bootContainer(t, nspawn, nsenter, rootfs)
	for _, f := range built {
		copyFile(t, f, c.path("/root/fleet/"+filepath.Base(f)))
	}
	t.Logf("container %s up after %s", c.name, time.Since(began).Round(time.Second))

	siteOn := func(metricsAddr string) string {
		return fmt.Sprintf(`# fleet check
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
	}
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
		// The metrics' port is told in the site file (the health gate of
		// the updates reads it there): when another process took it before
		// the gateway bound it, the journal says so, and the gateway starts
		// again on another.
		testtool.OnFreshPort(t, func(port int) error {
			metricsAddr = testtool.LoopbackAddr(port)
			site = siteOn(metricsAddr)
			writeFile(t, c.path("/etc/fieldlink/site.yaml"), site)
			c.must(t, "fieldlink-gateway check -c /etc/fieldlink/site.yaml")
			// With Type=notify, start returns once READY=1 came: polling runs.
			c.must(t, "systemctl enable fieldlink && systemctl restart fieldlink")
			return metricsListening(t, c)
		})
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

// metricsListening waits until the running gateway's journal says its
// metrics listen, or that their port was taken (testtool.ErrPortInUse; the
// gateway is stopped then).
func metricsListening(t *testing.T, c *container) error {
	t.Helper()
	pid := c.props(t, "MainPID")["MainPID"]
	var in bool
	if !testtool.Eventually(30*time.Second, 200*time.Millisecond, func() bool {
		out, _ := c.sh("journalctl -u fieldlink -o json --no-pager _PID=" + pid)
		in = testtool.PortInUse(out)
		return in || strings.Contains(out, `"metrics listening"`)
	}) {
		return fmt.Errorf("packaging: the gateway's journal says neither that its metrics listen nor why not:\n%s", c.journal(t))
	}
	if in {
		c.must(t, "systemctl stop fieldlink")
		return fmt.Errorf("%w: the gateway's metrics", testtool.ErrPortInUse)
	}
	return nil
}
