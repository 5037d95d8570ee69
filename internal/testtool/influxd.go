package testtool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Influxd is an InfluxDB 1.x server (Debian's influxdb package) of the
// test's own, on loopback ports of its own ([OnFreshPorts]), with its
// files in a temporary directory, until the test ends.
type Influxd struct {
	t         testing.TB
	bin, conf string
	port      int   // the HTTP API's
	ports     []int // the HTTP API's and the RPC's
	log       SyncBuffer
	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	client    http.Client
}

// StartInfluxd runs influxd; without it the test is skipped, or fails under
// CI=true.
func StartInfluxd(t testing.TB) *Influxd {
	t.Helper()
	bin := RequireSbin(t, "influxd", "influxdb")
	dir := t.TempDir()
	d := &Influxd{t: t, bin: bin, conf: filepath.Join(dir, "influxdb.conf")}
	t.Cleanup(func() {
		d.Kill()
		if t.Failed() {
			t.Logf("influxd log:\n%s", d.log.String())
		}
	})
	ports := OnFreshPorts(t, 2, func(ports []int) error {
		d.port = ports[0]
		conf := fmt.Sprintf(`reporting-disabled = true
bind-address = "127.0.0.1:%d"
[meta]
  dir = %q
[data]
  dir = %q
  wal-dir = %q
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:%d"
  log-enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
`, ports[1], filepath.Join(dir, "meta"), filepath.Join(dir, "data"), filepath.Join(dir, "wal"), ports[0])
		if err := os.WriteFile(d.conf, []byte(conf), 0o600); err != nil {
			return fmt.Errorf("testtool: %w", err)
		}
		return d.tryStart()
	})
	d.ports = ports
	return d
}

// tryStart runs influxd and waits until /ping answers; it fails, with
// ErrPortInUse when the log says so, if influxd exits first.
func (d *Influxd) tryStart() error {
	mark := d.log.Len()
	cmd := exec.Command(d.bin, "-config", d.conf)
	cmd.Stdout, cmd.Stderr = &d.log, &d.log
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testtool: start influxd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := d.client.Get(d.URL("/ping", nil))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		select {
		case <-exited:
			d.Kill()
			if log := d.log.Since(mark); PortInUse(log) {
				return fmt.Errorf("%w: influxd on %v: %s", ErrPortInUse, d.ports, log)
			}
			return errors.New("testtool: influxd exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
	d.Kill()
	return errors.New("testtool: influxd did not answer /ping within 30s")
}

// Start runs influxd again, on its ports and files, after Kill; while a
// port is still taken it waits for it.
func (d *Influxd) Start() {
	d.t.Helper()
	OnSamePorts(d.t, d.ports, func([]int) error { return d.tryStart() })
}

// Kill stops influxd with SIGKILL, as a power cut would, and waits for it;
// it does nothing when influxd is not running.
func (d *Influxd) Kill() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Addr is the HTTP API's host:port.
func (d *Influxd) Addr() string { return "127.0.0.1:" + strconv.Itoa(d.port) }

// URL is the HTTP API's URL for path and query q (nil: none).
func (d *Influxd) URL(path string, q url.Values) string {
	u := "http://" + d.Addr() + path
	if q != nil {
		u += "?" + q.Encode()
	}
	return u
}

// InfluxSeries is one series of a query's answer; numbers are json.Number.
type InfluxSeries struct {
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
	Columns []string          `json:"columns"`
	Values  [][]any           `json:"values"`
}

// Query runs an InfluxQL statement on db ("" for none), times in seconds,
// and returns the series of its answer; an error fails the test.
func (d *Influxd) Query(db, q string) []InfluxSeries {
	d.t.Helper()
	resp, err := d.client.PostForm(d.URL("/query", url.Values{"db": {db}, "epoch": {"s"}}), url.Values{"q": {q}})
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var ans struct {
		Results []struct {
			Series []InfluxSeries `json:"series"`
			Error  string         `json:"error"`
		} `json:"results"`
		Error string `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&ans); err != nil || resp.StatusCode != http.StatusOK || ans.Error != "" || len(ans.Results) != 1 || ans.Results[0].Error != "" {
		d.t.Fatalf("%s: %s %s (%v)", q, resp.Status, body, err)
	}
	return ans.Results[0].Series
}
