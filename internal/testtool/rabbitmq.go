package testtool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rabbitBin is where Debian keeps RabbitMQ's own scripts: the wrappers in
// /usr/sbin switch to the rabbitmq user, who cannot read a test's
// temporary directory, and log to /var/log.
const rabbitBin = "/usr/lib/rabbitmq/bin"

// RabbitBootLimit bounds a node's boot: Erlang and RabbitMQ take 20-40 s
// to boot on a busy 2-core machine, and after the whole cluster stopped
// 3.10's MQTT plugin holds the boot of all but one node for its client id
// tracker's 100 s timeout, or a multiple of it (mqtt_node:join_peers asks
// a peer whose tracker cannot elect a leader alone).
const RabbitBootLimit = 6 * time.Minute

// RabbitMQ is a cluster of rabbitmq-server nodes (Debian's) of the test's
// own, with the MQTT plugin on every node, each on loopback ports of its
// own, with an epmd of the cluster's and a shared Erlang cookie, its files
// in temporary directories, until the test ends.
type RabbitMQ struct {
	Nodes []*RabbitNode
	home  string // HOME, where the cookie is
	epmd  int    // its port (ERL_EPMD_PORT)
}

// RabbitNode is one node: Name is its Erlang node name (rabbit1@localhost).
type RabbitNode struct {
	Name  string
	r     *RabbitMQ
	t     testing.TB
	dir   string
	ports []int // AMQP, distribution, MQTT
	conf  string
	log   SyncBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartRabbitMQ starts n nodes with conf (lines of rabbitmq.conf; the
// listeners are added) and joins the others to the first with
// rabbitmqctl (stop_app, join_cluster, start_app). Without
// rabbitmq-server the test is skipped, or fails under CI=true.
func StartRabbitMQ(t testing.TB, n int, conf ...string) *RabbitMQ {
	t.Helper()
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		Missing(t, "rabbitmq-server ("+rabbitBin+")", "rabbitmq-server")
	}
	epmd := RequireSbin(t, "epmd", "erlang-base")
	r := &RabbitMQ{home: t.TempDir()}
	// The cookie every node and rabbitmqctl share, in their HOME.
	if err := os.WriteFile(filepath.Join(r.home, ".erlang.cookie"), []byte("FIELDLINKTESTCOOKIE"), 0o400); err != nil {
		t.Fatal(err)
	}
	r.startEpmd(t, epmd)
	for i := range n {
		dir := t.TempDir()
		node := &RabbitNode{Name: fmt.Sprintf("rabbit%d@localhost", i+1), r: r, t: t, dir: dir, conf: strings.Join(conf, "\n")}
		r.Nodes = append(r.Nodes, node)
		t.Cleanup(func() {
			node.Kill()
			if t.Failed() {
				t.Logf("rabbitmq %s log (tail):\n%s", node.Name, tailLines(node.log.String(), 40))
			}
		})
	}
	// All nodes boot at once (each takes tens of seconds), on fresh ports.
	OnFreshPorts(t, 3*n, func(p []int) error {
		for i, node := range r.Nodes {
			node.ports = p[3*i : 3*i+3]
			if err := os.RemoveAll(filepath.Join(node.dir, "mnesia")); err != nil { // a failed try's
				return err
			}
		}
		return r.startAll(r.Nodes)
	})
	for _, node := range r.Nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", r.Nodes[0].Name}, {"start_app"}} {
			if out, err := node.Ctl(args...); err != nil {
				t.Fatalf("rabbitmqctl -n %s %s: %v\n%s", node.Name, strings.Join(args, " "), err, out)
			}
		}
	}
	return r
}

// startEpmd runs the cluster's epmd in the foreground, on a fresh port,
// so that it ends with the test and no other test's nodes share it.
func (r *RabbitMQ) startEpmd(t testing.TB, bin string) {
	t.Helper()
	var log SyncBuffer
	var cmd *exec.Cmd
	r.epmd = OnFreshPort(t, func(port int) error {
		mark := log.Len()
		cmd = exec.Command(bin, "-d", "-port", fmt.Sprint(port), "-address", "127.0.0.1")
		cmd.Stdout, cmd.Stderr = &log, &log
		dieWithTest(cmd)
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("testtool: start epmd: %w", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		if err := waitListening(LoopbackAddr(port), exited, 10*time.Second); err != nil {
			_ = cmd.Process.Kill()
			<-exited
			if l := log.Since(mark); PortInUse(l) {
				return fmt.Errorf("%w: epmd: %s", ErrPortInUse, l)
			}
			return fmt.Errorf("testtool: epmd on %d: %w: %s", port, err, log.Since(mark))
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		return nil
	})
}

// startAll boots nodes at once and waits until each one's MQTT listener
// accepts connections; when one failed, all are killed, and the error is
// ErrPortInUse if any said a port of its was taken.
func (r *RabbitMQ) startAll(nodes []*RabbitNode) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = n.tryStart() }()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		for _, n := range nodes {
			n.Kill()
		}
		for _, e := range errs {
			if errors.Is(e, ErrPortInUse) {
				return fmt.Errorf("%w: %v", ErrPortInUse, err)
			}
		}
	}
	return err
}

// Restart boots nodes again after Kill, at once (after the whole cluster
// stopped, each waits for the others), on their ports and files; while a
// port is still taken they wait for it (see [SamePorts]).
func (r *RabbitMQ) Restart(nodes ...*RabbitNode) error {
	var ports []int
	for _, n := range nodes {
		ports = append(ports, n.ports...)
	}
	return SamePorts(ports, func([]int) error { return r.startAll(nodes) })
}

// env is the environment of the node's server and of rabbitmqctl for it.
func (n *RabbitNode) env() []string {
	f := func(name string) string { return filepath.Join(n.dir, name) }
	return append(os.Environ(),
		"HOME="+n.r.home,
		fmt.Sprintf("ERL_EPMD_PORT=%d", n.r.epmd),
		"RABBITMQ_NODENAME="+n.Name,
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", n.ports[0]),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", n.ports[1]),
		"RABBITMQ_CONF_ENV_FILE="+f("rabbitmq-env.conf"), // none: not the host's
		"RABBITMQ_CONFIG_FILE="+f("rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+f("advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+f("enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+f("mnesia"),
		"RABBITMQ_LOG_BASE="+f("log"),
		"RABBITMQ_PID_FILE="+f("rabbitmq.pid"),
		// The script execs erl itself (no shell in between to outlive a
		// kill) with input allowed, -noinput given here instead.
		"RABBITMQ_ALLOW_INPUT=1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-noinput -kernel inet_dist_use_interface {127,0,0,1}",
	)
}

// tryStart writes the node's files and boots it; it returns once its MQTT
// listener accepts connections, or fails, with ErrPortInUse when its log
// says a port was taken, if the node exits first.
func (n *RabbitNode) tryStart() error {
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nmqtt.listeners.tcp.default = 127.0.0.1:%d\nlog.console = true\nlog.console.level = info\nlog.file = false\n%s\n",
		n.ports[0], n.ports[2], n.conf)
	for name, content := range map[string]string{"rabbitmq.conf": conf, "enabled_plugins": "[rabbitmq_mqtt].\n"} {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o600); err != nil {
			return fmt.Errorf("testtool: %w", err)
		}
	}
	mark := n.log.Len()
	cmd := exec.Command(filepath.Join(rabbitBin, "rabbitmq-server"))
	cmd.Env = n.env()
	cmd.Dir = n.dir // erl_crash.dump
	cmd.Stdout, cmd.Stderr = &n.log, &n.log
	// Its own process group, killed whole (erl_child_setup, inet_gethost),
	// and the node dies with a killed test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testtool: start rabbitmq-server %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	if err := waitListening(n.MQTTAddr(), exited, RabbitBootLimit); err != nil {
		n.Kill()
		if l := n.log.Since(mark); PortInUse(l) {
			return fmt.Errorf("%w: rabbitmq-server %s on %v", ErrPortInUse, n.Name, n.ports)
		}
		return fmt.Errorf("testtool: rabbitmq-server %s: %w:\n%s", n.Name, err, tailLines(n.log.Since(mark), 20))
	}
	return nil
}

// waitListening waits until addr accepts a connection, for at most limit,
// or until exited is closed.
func waitListening(addr string, exited <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited before it listened on " + addr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s within %v", addr, limit)
		}
	}
}

// Kill stops the node with SIGKILL, its whole process group, and waits
// for it; nothing when it is not running.
func (n *RabbitNode) Kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd, n.exited = nil, nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Ctl runs rabbitmqctl against the node (2 minutes at most) and returns
// what it printed.
func (n *RabbitNode) Ctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(rabbitBin, "rabbitmqctl"), append([]string{"-q", "-n", n.Name}, args...)...)
	cmd.Env = n.env()
	cmd.Dir = n.dir
	dieWithTest(cmd)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// MQTTAddr is the node's MQTT listener.
func (n *RabbitNode) MQTTAddr() string { return LoopbackAddr(n.ports[2]) }

// Log is what the node wrote so far.
func (n *RabbitNode) Log() string { return n.log.String() }

func tailLines(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
