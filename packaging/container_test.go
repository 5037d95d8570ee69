//go:build fleet

package packaging_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

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
