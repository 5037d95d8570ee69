package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"fieldlink/internal/testtool"
)

// child is a process this program started, in its own process group, with
// its output in a log file.
type child struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error
}

func start(name, logPath, dir string, env []string, argv ...string) (*child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("footprint: start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the child's process group, and SIGKILL if it has
// not exited after grace.
func (c *child) stop(grace time.Duration) {
	if !c.running() {
		return
	}
	_ = syscall.Kill(-c.pid(), syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-c.pid(), syscall.SIGKILL)
		<-c.exited
	}
}

// tail returns the last n lines of the child's log.
func (c *child) tail(n int) string {
	data, _ := os.ReadFile(c.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// serve starts a server on a loopback port of its own (testtool.FreshPort),
// argv built from the port, and waits until it accepts connections; when
// the server exits first saying its port was taken, it tries another port.
func serve(name, logPath string, argv func(port int) []string) (*child, string, error) {
	var c *child
	port, err := testtool.FreshPort(func(port int) error {
		addr := testtool.LoopbackAddr(port)
		var err error
		if c, err = start(name, logPath, "", nil, argv(port)...); err != nil {
			return err
		}
		return listeningOrTaken(c, addr, 15*time.Second)
	})
	if err != nil {
		return nil, "", err
	}
	return c, testtool.LoopbackAddr(port), nil
}

// listeningOrTaken waits until addr accepts connections (nil), or c exits
// saying its port was taken (testtool.ErrPortInUse; "port in use" is
// Node-RED's words), or timeout passes.
func listeningOrTaken(c *child, addr string, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline) && c.running(); {
		if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			nc.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.stop(time.Second)
	log, _ := os.ReadFile(c.log)
	if testtool.PortInUse(string(log)) || strings.Contains(string(log), "port in use") {
		return fmt.Errorf("%w: %s on %s", testtool.ErrPortInUse, c.name, addr)
	}
	return fmt.Errorf("footprint: %s did not listen on %s; its log %s ends:\n%s", c.name, addr, c.log, tailFile(c.log, 10))
}

func tailFile(path string, n int) string { return (&child{log: path}).tail(n) }

// findMosquitto returns the mosquitto binary: the flag, PATH, or where
// Debian installs it.
func findMosquitto(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	p, err := testtool.LookSbin("mosquitto")
	if err != nil {
		return "", fmt.Errorf("footprint: %w (Debian/Ubuntu: sudo apt-get install -y mosquitto)", err)
	}
	return p, nil
}

// installNodeRED makes sure cache holds the node_modules of
// scripts/footprint's package-lock.json, running `npm ci` (without install
// scripts: Modbus TCP needs no native serial bindings) only when the lock
// file changed since the last install. It returns red.js.
func installNodeRED(srcDir, cache string, stdout *os.File) (string, error) {
	lock, err := os.ReadFile(filepath.Join(srcDir, "package-lock.json"))
	if err != nil {
		return "", fmt.Errorf("footprint: %w", err)
	}
	pkg, err := os.ReadFile(filepath.Join(srcDir, "package.json"))
	if err != nil {
		return "", fmt.Errorf("footprint: %w", err)
	}
	sum := sha256.Sum256(append(append([]byte{}, pkg...), lock...))
	want := hex.EncodeToString(sum[:])
	red := filepath.Join(cache, "node_modules", "node-red", "red.js")
	stamp := filepath.Join(cache, ".installed")
	if got, err := os.ReadFile(stamp); err == nil && string(bytes.TrimSpace(got)) == want {
		if _, err := os.Stat(red); err == nil {
			return red, nil
		}
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", errors.New("footprint: npm not found: Node-RED needs Node.js 20 and npm (Debian/Ubuntu: sudo apt-get install -y nodejs npm)")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(cache, name), data, 0o644); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(stdout, "installing Node-RED from scripts/footprint/package-lock.json into %s (npm ci) ...\n", cache)
	cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = cache
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("footprint: npm ci in %s: %w", cache, err)
	}
	if err := os.WriteFile(stamp, []byte(want+"\n"), 0o644); err != nil {
		return "", err
	}
	return red, nil
}

// treeBytes is the total size of the regular files under dir.
func treeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
