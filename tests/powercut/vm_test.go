//go:build powercut

package powercut

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/agent"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
)

// guestModules are the kernel modules the guest loads, in this order: the
// virtio PCI transport, the disk, the network card (for qemu's guestfwd to
// the host's loopback), ext4 and what it needs, and device-mapper with its
// flakey and delay targets (loaded, unused yet: for a dying card's faults).
var guestModules = []string{
	"drivers/virtio/virtio_ring", "drivers/virtio/virtio", "drivers/virtio/virtio_pci_legacy_dev",
	"drivers/virtio/virtio_pci_modern_dev", "drivers/virtio/virtio_pci", "drivers/block/virtio_blk",
	"net/core/failover", "drivers/net/net_failover", "drivers/net/virtio_net",
	"lib/crc16", "fs/mbcache", "fs/jbd2/jbd2", "crypto/crc32c_generic", "fs/ext4/ext4",
	"drivers/md/dm-mod", "drivers/md/dm-flakey", "drivers/md/dm-delay",
}

// The guest reaches the emulator and the broker on the host at these
// addresses: qemu's user network with restrict=on (no route out) forwards
// each connection to a socat that qemu starts, which connects to the
// host's loopback. No bridged or routed network.
const (
	guestHost = "10.0.2.100"
	guestEmu  = guestHost + ":502"
	guestMQTT = guestHost + ":1883"
)

// bootLimit bounds one boot, from qemu's start to the gateway's first
// stored packet: 12-30 s under TCG on a busy 2-core machine.
const bootLimit = 3 * time.Minute

// vmCutKinds are the VM's cuts, in turn: during an uplink outage, packets
// piled up in the buffer (outage); just after a packet was reported
// stored, in the next poll cycle's commit (commit); just after the broker
// took packets, while the gateway deletes the acknowledged records (ack);
// anywhere (random).
var vmCutKinds = []string{"outage", "commit", "ack", "random"}

// TestVM is the real level: the field build as the daemon of a qemu VM
// booting Debian's own kernel (TCG: the paravirtual /dev/kvm of these
// machines hangs a stock kernel), its buffer on ext4 with default mount
// options on a virtio disk (cache=none), the guest's dirty pages kept in
// its memory (dirty_expire 1 h, no periodic writeback). A cut is SIGKILL
// of qemu; the next boot is on the same disk. POWERCUT_VM_CUTS cuts
// (default 5), then POWERCUT_VM_CONTROL_CUTS (default 2) with the buffer's
// fsync off, which must lose packets.
func TestVM(t *testing.T) {
	s := vmRequire(t)
	for _, run := range []struct {
		name    string
		cuts    int
		control bool
	}{
		{"fsync", envInt(t, "POWERCUT_VM_CUTS", 5), false},
		{"control", envInt(t, "POWERCUT_VM_CONTROL_CUTS", 2), true},
	} {
		t.Run(run.name, func(t *testing.T) {
			began := time.Now()
			led := newLedger()
			f := runVM(t, s, led, run.cuts, run.control)
			if run.control {
				f.level = "vm-control"
			}
			t.Logf("%s, %s", f, time.Since(began).Round(time.Second))
			check(t, f, led, run.control)
		})
	}
}

type vmSetup struct {
	qemu, mkfs, mosq, busybox, gateway string
	kern                               kernel
}

// vmRequire finds what the VM level needs (root, qemu, socat, mkfs.ext4,
// mosquitto, a static busybox, Debian's kernel), or skips the test (fails
// it in CI), and builds the field gateway.
func vmRequire(t *testing.T) vmSetup {
	t.Helper()
	if os.Geteuid() != 0 {
		testtool.Unsupported(t, "root: apt-get download fetches the guest's kernel")
	}
	qemu := testtool.Require(t, "qemu-system-x86_64", "qemu-system-x86")
	testtool.Require(t, "socat", "socat")
	mkfs := testtool.RequireSbin(t, "mkfs.ext4", "e2fsprogs")
	mosq := testtool.FindMosquitto(t)
	return vmSetup{qemu: qemu, mkfs: mkfs, mosq: mosq, busybox: findBusybox(t), kern: debianKernel(t), gateway: buildGateway(t)}
}

func runVM(t *testing.T, s vmSetup, led *ledger, cuts int, control bool) figures {
	rng, seed := seeded(t)
	dir := t.TempDir()
	_, emuAddr := emutest.Serve(t, false, siteDevices...)
	broker := testtool.StartMosquitto(t, s.mosq)
	subscribe(t, broker, led)
	uplink := newLink(t, broker)
	site := siteFile(t, dir, guestEmu, guestMQTT, "/data/buffer.db", false)
	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitramfs(t, initrd, s, site)
	disk := newVMDisk(t, s.mkfs, dir)
	nosync := "0"
	if control {
		nosync = "1"
	}
	// Unknown name=value words of the kernel's command line are init's
	// environment.
	cmdline := "console=ttyS0 quiet loglevel=3 panic=-1 " + agent.UnsafeNoSyncEnv + "=" + nosync
	args := qemuArgs(s, initrd, disk, cmdline, emuAddr, uplink.Addr())
	log := consoleLog(t, dir)
	t.Logf("seed %d, %d cuts, control %v; qemu %s", seed, cuts, control, strings.Join(args, " "))

	salvages := 0
	var salvaged []string
	last := cuts + 1 // the last boot, which is not cut
	for i := 1; i <= last; i++ {
		vm := bootVM(t, s.qemu, args, led, log, i)
		up := led.waitUntil(bootLimit, func() bool { return vm.gone.Load() || vm.printed.Load() > 0 })
		if !up || vm.gone.Load() {
			vm.kill(t)
			t.Fatalf("boot %d: no packet stored within %v of qemu's start (qemu exited: %v); console:\n%s", i, bootLimit, vm.gone.Load(), tail(vm.console.String(), 4000))
		}
		t.Logf("boot %d: first packet stored %s after qemu's start", i, time.Since(vm.start).Round(100*time.Millisecond))
		if c := vm.console.String(); strings.Contains(c, "powercut: insmod") || strings.Contains(c, "powercut: cannot mount") {
			vm.kill(t)
			t.Fatalf("boot %d: the guest's init failed; console:\n%s", i, tail(c, 4000))
		}
		if i > cuts {
			// The last boot: no cut. Every packet stored must arrive.
			limit := 2 * time.Minute
			if control {
				limit = 15 * time.Second // its losses never arrive
			}
			delivered := led.waitUntil(limit, func() bool { return vm.gone.Load() || len(led.missingLocked()) == 0 })
			vm.kill(t)
			// A packet the guest reports stored between the wait and the
			// kill is in the buffer on the guest's disk, not lost: one
			// more boot delivers it (twice at most; a packet really lost
			// stays missing).
			if n := len(led.missing()); delivered && !control && n > 0 && last < cuts+3 {
				t.Logf("boot %d: %d packets stored as it was stopped wait in its buffer: one more boot to deliver them", i, n)
				last++
			}
		} else {
			kind := vmCutKinds[(i-1)%len(vmCutKinds)]
			var ok bool
			switch kind {
			case "random":
				ok = true
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond) // the cut's moment, not a synchronisation
			case "commit":
				k := vm.printed.Load() + int64(1+rng.IntN(20))
				ok = led.waitUntil(time.Minute, func() bool { return vm.gone.Load() || vm.printed.Load() >= k })
			case "ack":
				base, k := led.receivedCount(), 1+rng.IntN(20)
				ok = led.waitUntil(time.Minute, func() bool { return vm.gone.Load() || led.received >= base+k })
			case "outage":
				uplink.set(false)
				k := vm.printed.Load() + int64(10+rng.IntN(40))
				ok = led.waitUntil(time.Minute, func() bool { return vm.gone.Load() || vm.printed.Load() >= k })
			}
			if !ok || vm.gone.Load() {
				vm.kill(t)
				t.Fatalf("cut %d (%s): qemu exited, or the gateway stored nothing for a minute; console:\n%s", i, kind, tail(vm.console.String(), 4000))
			}
			t.Logf("cut %d (%s) after %d packets stored in this boot", i, kind, vm.printed.Load())
		}
		vm.kill(t)
		uplink.set(true)
		if c := vm.console.String(); strings.Contains(c, salvageMark) {
			salvages++
			for _, l := range strings.Split(c, "\n") {
				if strings.Contains(l, salvageMark) || strings.Contains(l, salvageDone) {
					salvaged = append(salvaged, fmt.Sprintf("boot %d: %s", i, strings.TrimSpace(l)))
				}
			}
		}
	}
	return led.figures("vm", cuts, salvages, salvaged)
}

// newVMDisk is the guest's disk: a 64 MiB raw image in dir, ext4 made by
// the host's mkfs.
func newVMDisk(t *testing.T, mkfs, dir string) string {
	t.Helper()
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-F", "-q", disk).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	return disk
}

// qemuArgs are qemu's arguments for a boot of the kernel and initrd on
// disk, with the kernel's command line cmdline, the guest's connections to
// the emulator and the broker forwarded to emuAddr and mqttAddr on the
// host.
func qemuArgs(s vmSetup, initrd, disk, cmdline, emuAddr, mqttAddr string) []string {
	return []string{
		"-accel", vmAccel(), "-m", "512", "-smp", "1", "-nodefaults", "-no-reboot",
		"-display", "none", "-monitor", "none", "-serial", "stdio",
		"-kernel", s.kern.vmlinuz, "-initrd", initrd, "-append", cmdline,
		"-drive", "file=" + disk + ",format=raw,if=virtio,cache=none",
		"-netdev", fmt.Sprintf("user,id=n0,restrict=on,guestfwd=tcp:%s-cmd:socat - TCP:%s,guestfwd=tcp:%s-cmd:socat - TCP:%s",
			guestEmu, emuAddr, guestMQTT, mqttAddr),
		"-device", "virtio-net-pci,netdev=n0",
	}
}

// consoleLog is dir/console.log, where the boots' console lines other than
// packets go; its tail is shown when the test fails.
func consoleLog(t *testing.T, dir string) *lockedWriter {
	t.Helper()
	consolePath := filepath.Join(dir, "console.log")
	console, err := os.Create(consolePath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		console.Close()
		if t.Failed() {
			b, _ := os.ReadFile(consolePath)
			t.Logf("console (%s), packets left out:\n%s", consolePath, tail(string(b), 30000))
		}
	})
	return &lockedWriter{w: console}
}

// vmAccel is qemu's accelerator: tcg, unless POWERCUT_VM_ACCEL names
// another (kvm, where /dev/kvm runs a stock kernel).
func vmAccel() string {
	if a := os.Getenv("POWERCUT_VM_ACCEL"); a != "" {
		return a
	}
	return "tcg"
}

// vm is one boot of the guest: qemu itself, never a wrapper, so that the
// cut's SIGKILL is the power cut.
type vm struct {
	n       int
	cmd     *exec.Cmd
	start   time.Time
	printed atomic.Int64
	gone    atomic.Bool
	console testtool.SyncBuffer // the console's lines that are not packets
	exited  chan struct{}
}

// bootVM starts qemu; the packets the guest reports stored on its console
// go to led, everything else to log and vm.console.
func bootVM(t *testing.T, qemu string, args []string, led *ledger, log io.Writer, n int) *vm {
	t.Helper()
	return bootVMInput(t, qemu, args, led, log, n, nil)
}

// bootVMInput is bootVM with stdin as the serial console's input (nil:
// none).
func bootVMInput(t *testing.T, qemu string, args []string, led *ledger, log io.Writer, n int, stdin io.Reader) *vm {
	t.Helper()
	v := &vm{n: n, exited: make(chan struct{}), start: time.Now()}
	v.cmd = exec.Command(qemu, args...)
	v.cmd.Stdin = stdin
	stdout, err := v.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	v.cmd.Stderr = io.MultiWriter(log, &v.console)
	fmt.Fprintf(log, "=== boot %d at %s\n", n, time.Now().Format("15:04:05.000"))
	if err := v.cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	t.Cleanup(func() { v.kill(t) })
	go func() {
		defer close(v.exited)
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				break // a line cut short by the cut was never reported whole
			}
			line = bytes.TrimRight(line, "\r\n")
			if i := bytes.Index(line, []byte(`{"DataHead"`)); i >= 0 {
				v.printed.Add(1)
				led.take(line[i:], false)
				continue
			}
			fmt.Fprintf(log, "%s\n", line)
			fmt.Fprintf(&v.console, "%s\n", line)
		}
		_ = v.cmd.Wait()
		v.gone.Store(true)
		led.poke()
	}()
	return v
}

// kill is the cut: SIGKILL of qemu itself, then wait until it is reaped.
func (v *vm) kill(t *testing.T) {
	t.Helper()
	_ = v.cmd.Process.Kill()
	select {
	case <-v.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("qemu (boot %d) did not exit within 30s of its SIGKILL", v.n)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// findBusybox returns a static busybox, the guest's userland.
func findBusybox(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false // busybox, not busybox-static
			}
		}
		f.Close()
		if static {
			return p
		}
	}
	testtool.Missing(t, "a static busybox", "busybox-static")
	return ""
}
