//go:build cluster

package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// clusterName is the NATS cluster's name in every node's config.
const clusterName = "fieldlink"

// node is one nats-server process of the cluster, on loopback ports it
// keeps for the whole test so that it can be killed and started again
// where the others route to it.
type node struct {
	t                   *testing.T
	name                string // server_name: n1, n2, n3
	bin, conf, dir      string
	mqtt, http, cluster int
	peers               []*node // the other nodes, routed to
	log                 testtool.SyncBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// newCluster starts three clustered nodes, JetStream and MQTT on each, on
// ports of their own (testtool.OnFreshPorts: when one was taken, all three
// start again on others, so that every route names a node's port); it
// returns once every node has its two routes and says JetStream is ready
// (the MQTT streams are made by the first MQTT client). They are killed
// when the test ends.
func newCluster(t *testing.T, bin string) [3]*node {
	t.Helper()
	var nodes [3]*node
	for i := range nodes {
		dir := t.TempDir()
		n := &node{t: t, name: fmt.Sprintf("n%d", i+1), bin: bin, dir: dir, conf: filepath.Join(dir, fmt.Sprintf("n%d.conf", i+1))}
		nodes[i] = n
		t.Cleanup(func() {
			n.kill()
			keepLog(t, n.name+".log", n.log.String())
			if t.Failed() {
				t.Logf("nats-server %s log (tail):\n%s", n.name, tail(n.log.String(), 40))
			}
		})
	}
	for _, n := range nodes {
		for _, o := range nodes {
			if o != n {
				n.peers = append(n.peers, o)
			}
		}
	}
	testtool.OnFreshPorts(t, 3*len(nodes), func(p []int) error {
		for i, n := range nodes {
			n.mqtt, n.http, n.cluster = p[3*i], p[3*i+1], p[3*i+2]
			if err := os.RemoveAll(filepath.Join(n.dir, "store")); err != nil { // a failed try's
				return err
			}
		}
		for _, n := range nodes {
			if err := n.tryStart(); err != nil {
				for _, o := range nodes {
					o.kill()
				}
				return err
			}
		}
		return nil
	})
	testtool.WaitFor(t, 60*time.Second, "the three nodes routed, JetStream ready", func() bool {
		for _, n := range nodes {
			var h struct {
				Status string `json:"status"`
			}
			if !n.routed() || n.get("/healthz", &h) != nil || h.Status != "ok" {
				return false
			}
		}
		return true
	})
	return nodes
}

// writeConf writes the node's config on its ports, with routes to the
// others.
func (n *node) writeConf() error {
	var routes []string
	for _, o := range n.peers {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.cluster))
	}
	// stream_replicas 3: the MQTT streams on all three nodes, whatever
	// the cluster looks like when the first MQTT client connects.
	conf := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:-1"
http: "127.0.0.1:%d"
jetstream { store_dir: %q }
cluster {
  name: %s
  listen: "127.0.0.1:%d"
  routes: [%s]
}
mqtt { listen: "127.0.0.1:%d", stream_replicas: 3 }
`, n.name, n.http, filepath.Join(n.dir, "store"), clusterName, n.cluster, strings.Join(routes, ", "), n.mqtt)
	return os.WriteFile(n.conf, []byte(conf), 0o600)
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// mqttAddr is the node's MQTT listener.
func (n *node) mqttAddr() string { return fmt.Sprintf("127.0.0.1:%d", n.mqtt) }

// start runs the node again after kill, on its ports, routed to both
// others; while one of its ports is still taken it waits for it.
func (n *node) start() {
	n.t.Helper()
	testtool.OnSamePorts(n.t, []int{n.mqtt, n.http, n.cluster}, func([]int) error { return n.tryStart() })
}

// tryStart writes the node's config, runs it and waits until its MQTT port
// accepts connections; it fails, with testtool.ErrPortInUse when the log
// says so, if the node exits first.
func (n *node) tryStart() error {
	if err := n.writeConf(); err != nil {
		return err
	}
	mark := n.log.Len()
	cmd := exec.Command(n.bin, "-c", n.conf)
	cmd.Stdout, cmd.Stderr = &n.log, &n.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with a killed test
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server %s: %w", n.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", n.mqttAddr(), time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			n.kill()
			if log := n.log.Since(mark); testtool.PortInUse(log) {
				return fmt.Errorf("%w: nats-server %s: %s", testtool.ErrPortInUse, n.name, tail(log, 5))
			}
			return fmt.Errorf("nats-server %s exited at start:\n%s", n.name, tail(n.log.Since(mark), 20))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.kill()
			return fmt.Errorf("nats-server %s: MQTT port %d not listening within 15s", n.name, n.mqtt)
		}
	}
}

// kill stops the node with SIGKILL and waits for it to exit; nothing when
// it is not running.
func (n *node) kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd, n.exited = nil, nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// get decodes the JSON of the node's monitoring endpoint path into v.
func (n *node) get(path string, v any) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", n.http, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// routed: the node has routes to both others.
func (n *node) routed() bool {
	var r struct {
		NumRoutes int `json:"num_routes"`
	}
	return n.get("/routez", &r) == nil && r.NumRoutes == 2
}

// settled: every node is routed to both others and the MQTT session and
// message streams have a leader that sees both other replicas current (a
// follower's view of the replicas is stale). It is not /healthz: 2.9.10
// can leave one replica of a consumer "not current" for minutes after a
// restart (its log says "Resource not found" for the consumer's tav.idx),
// which fails /healthz but not MQTT.
func settled(nodes []*node) bool {
	for _, n := range nodes {
		if !n.routed() {
			return false
		}
	}
	views := map[string]map[string]streamInfo{} // by node name
	for _, n := range nodes {
		ss, err := n.streams()
		if err != nil {
			return false
		}
		views[n.name] = ss
	}
	for _, name := range []string{"$MQTT_sess", "$MQTT_msgs"} {
		leader := views[nodes[0].name][name].Cluster.Leader
		s, ok := views[leader][name]
		if !ok || s.Cluster.Leader != leader || len(s.Cluster.Replicas) != len(nodes)-1 {
			return false
		}
		for _, r := range s.Cluster.Replicas {
			if !r.Current {
				return false
			}
		}
	}
	return true
}

// waitSettled waits until the cluster is settled (see settled).
func waitSettled(t *testing.T, nodes []*node) {
	t.Helper()
	testtool.WaitFor(t, 60*time.Second, "the cluster's nodes routed and the MQTT streams' replicas current", func() bool { return settled(nodes) })
}

// streamInfo is what /jsz says of one stream.
type streamInfo struct {
	Name   string `json:"name"`
	Config struct {
		Replicas  int    `json:"num_replicas"`
		Retention string `json:"retention"`
	} `json:"config"`
	Cluster struct {
		Leader   string `json:"leader"`
		Replicas []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
		} `json:"replicas"`
	} `json:"cluster"`
}

// streams lists the global account's streams as node n sees them.
func (n *node) streams() (map[string]streamInfo, error) {
	var j struct {
		Accounts []struct {
			Name    string       `json:"name"`
			Streams []streamInfo `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := n.get("/jsz?acc=$G&streams=true&config=true", &j); err != nil {
		return nil, err
	}
	out := map[string]streamInfo{}
	for _, a := range j.Accounts {
		for _, s := range a.Streams {
			out[s.Name] = s
		}
	}
	return out, nil
}

func execOutput(bin string, args ...string) (string, error) {
	b, err := exec.Command(bin, args...).Output()
	return string(b), err
}
