//go:build powercut

package powercut

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"fieldlink/internal/testtool"
)

// kernel is Debian's kernel for the guest, unpacked into the cache.
type kernel struct {
	pkg     string // linux-image-6.1.0-NN-amd64
	vmlinuz string
	modules string // guestModules, flat: <dir>/<name>.ko
}

// cacheDir is where the unpacked kernel is kept between runs:
// $XDG_CACHE_HOME/fieldlink/powercut, or ~/.cache/fieldlink/powercut.
func cacheDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("no cache directory: set XDG_CACHE_HOME: %v", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "fieldlink", "powercut")
}

// debianKernel returns the kernel that Debian's linux-image-amd64 depends
// on: fetched with apt-get download and unpacked with dpkg-deb the first
// time, then from the cache. Only vmlinuz and guestModules are kept.
func debianKernel(t *testing.T) kernel {
	t.Helper()
	aptCache := testtool.Require(t, "apt-cache", "apt")
	aptGet := testtool.Require(t, "apt-get", "apt")
	dpkgDeb := testtool.Require(t, "dpkg-deb", "dpkg")
	out, err := exec.Command(aptCache, "depends", "linux-image-amd64").Output()
	if err != nil {
		t.Fatalf("apt-cache depends linux-image-amd64: %v (is a Debian mirror in the apt sources, and apt-get update run?)", err)
	}
	pkg := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			pkg = f[1]
			break
		}
	}
	if pkg == "" {
		t.Fatalf("apt-cache depends linux-image-amd64 names no linux-image package:\n%s", out)
	}
	ver := strings.TrimPrefix(pkg, "linux-image-")
	dir := filepath.Join(cacheDir(t), pkg)
	k := kernel{pkg: pkg, vmlinuz: filepath.Join(dir, "vmlinuz"), modules: filepath.Join(dir, "modules")}
	// ready names what the cache entry holds: a new module list unpacks
	// the package again.
	ready := pkg + "\n" + strings.Join(guestModules, "\n") + "\n"
	if b, err := os.ReadFile(filepath.Join(dir, "ready")); err == nil && string(b) == ready {
		return k
	}
	t.Logf("fetching and unpacking %s into %s (once)", pkg, dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp(filepath.Dir(dir), pkg+".partial-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	dl := exec.Command(aptGet, "download", pkg)
	dl.Dir = work
	if out, err := dl.CombinedOutput(); err != nil {
		t.Fatalf("apt-get download %s: %v\n%s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(work, "*.deb"))
	if len(debs) != 1 {
		t.Fatalf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	x := filepath.Join(work, "x")
	if out, err := exec.Command(dpkgDeb, "-x", debs[0], x).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x %s: %v\n%s", debs[0], err, out)
	}
	keep := filepath.Join(work, "keep")
	if err := os.MkdirAll(filepath.Join(keep, "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(x, "boot", "vmlinuz-"+ver), filepath.Join(keep, "vmlinuz"))
	for _, m := range guestModules {
		src := filepath.Join(x, "lib", "modules", ver, "kernel", m+".ko")
		if _, err := os.Stat(src); err != nil {
			// Later Debian kernels compress their modules; busybox's
			// insmod takes only plain ones.
			t.Fatalf("%s has no %s.ko (compressed modules are not supported here): %v", pkg, m, err)
		}
		copyFile(t, src, filepath.Join(keep, "modules", filepath.Base(m)+".ko"))
	}
	if err := os.WriteFile(filepath.Join(keep, "ready"), []byte(ready), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(keep, dir); err != nil {
		t.Fatal(err)
	}
	return k
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// guestInit is the guest's /init: busybox, the modules in order, the
// guest's dirty pages kept in memory, the disk mounted (ext4, default
// options), the network card up for guestfwd, then the gateway as the
// daemon, its output on the console. Its stored packets' lines are what
// the host counts.
const guestInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in %s; do
	insmod /modules/$m.ko || echo "powercut: insmod $m failed"
done
# Keep the guest's dirty pages in its memory: only an fsync writes them.
echo 360000 > /proc/sys/vm/dirty_expire_centisecs
echo 0 > /proc/sys/vm/dirty_writeback_centisecs
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
mkdir -p /data
mount -t ext4 /dev/vda /data || echo "powercut: cannot mount /dev/vda"
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
echo "powercut: guest up, FIELDLINK_UNSAFE_NOSYNC=$FIELDLINK_UNSAFE_NOSYNC"
/gateway run -c /site.yaml -print -log-level warn -log-format text
echo "powercut: the gateway exited with status $?"
poweroff -f
`

// guestInitWith is guestInit up to the line that begins with from, then
// tail: the /init of a run that drives its guest its own way.
func guestInitWith(t *testing.T, from, tail string) string {
	t.Helper()
	i := strings.Index(guestInit, "\n"+from)
	if i < 0 {
		t.Fatalf("guestInit has no line that begins with %q", from)
	}
	return guestInit[:i+1] + tail
}

// buildGuestTool builds the command fieldlink/tests/powercut/<name>,
// static, for the guest.
func buildGuestTool(t *testing.T, name string) string {
	t.Helper()
	return testtool.Build{Package: "fieldlink/tests/powercut/" + name, GOARCH: "amd64", Static: true, Release: true}.Run(t)
}

// writeInitramfs writes the guest's root, an uncompressed newc cpio
// archive: busybox, /init, the modules, the gateway, the site file.
func writeInitramfs(t *testing.T, path string, s vmSetup, site string) {
	t.Helper()
	writeInitramfsWith(t, path, s, site, guestInit, nil)
}

// writeInitramfsWith is writeInitramfs with an /init of the caller's (a
// format whose %s is the modules' names) and extra files (name in the
// root: the host's file), executable.
func writeInitramfsWith(t *testing.T, path string, s vmSetup, site, init string, extra map[string]string) {
	t.Helper()
	var names []string
	for _, m := range guestModules {
		names = append(names, filepath.Base(m))
	}
	w := &cpio{}
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "data", "tmp", "modules"} {
		w.add(t, d, syscall.S_IFDIR|0o755, nil, 0)
	}
	// root alone: the gateway, run as root, looks for the service's user.
	w.add(t, "etc/passwd", syscall.S_IFREG|0o644, []byte("root:x:0:0:root:/:/bin/sh\n"), 0)
	w.add(t, "etc/group", syscall.S_IFREG|0o644, []byte("root:x:0:\n"), 0)
	w.add(t, "dev/console", syscall.S_IFCHR|0o600, nil, 5<<8|1)
	w.add(t, "init", syscall.S_IFREG|0o755, []byte(fmt.Sprintf(init, strings.Join(names, " "))), 0)
	for name, src := range extra {
		w.addFile(t, name, src, 0o755)
	}
	w.addFile(t, "bin/busybox", s.busybox, 0o755)
	w.addFile(t, "gateway", s.gateway, 0o755)
	w.addFile(t, "site.yaml", site, 0o644)
	for _, n := range names {
		w.addFile(t, "modules/"+n+".ko", filepath.Join(s.kern.modules, n+".ko"), 0o644)
	}
	w.add(t, "TRAILER!!!", 0, nil, 0)
	if err := os.WriteFile(path, w.buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cpio writes the newc format that the kernel unpacks into its rootfs.
type cpio struct {
	buf bytes.Buffer
	ino int
}

func (c *cpio) addFile(t *testing.T, name, src string, perm uint32) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	c.add(t, name, syscall.S_IFREG|perm, b, 0)
}

// add appends one entry; rdev is major<<8|minor for a device.
func (c *cpio) add(t *testing.T, name string, mode uint32, data []byte, rdev int) {
	t.Helper()
	c.ino++
	nlink := 1
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		nlink = 2
	}
	fmt.Fprintf(&c.buf, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev>>8, rdev&0xff, len(name)+1, 0)
	c.buf.WriteString(name)
	c.buf.WriteByte(0)
	c.pad()
	c.buf.Write(data)
	c.pad()
}

func (c *cpio) pad() {
	for c.buf.Len()%4 != 0 {
		c.buf.WriteByte(0)
	}
}
