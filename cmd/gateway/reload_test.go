package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// reloadIngest is an HTTP upstream that acks every batch and records, per
// device, the seqs it was sent.
type reloadIngest struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string]map[uint64]bool // device → seqs
	n   int
}

func newReloadIngest(t *testing.T) *reloadIngest {
	in := &reloadIngest{got: map[string]map[uint64]bool{}}
	in.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var parts []json.RawMessage
		if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
			_ = json.Unmarshal(b, &parts)
		} else {
			parts = []json.RawMessage{body}
		}
		in.mu.Lock()
		defer in.mu.Unlock()
		for _, p := range parts {
			pk, err := packet.Decode(p)
			if err != nil {
				t.Errorf("upstream got a bad packet: %v", err)
				continue
			}
			testtool.ValidPacket(t, p)
			if in.got[pk.DeviceID] == nil {
				in.got[pk.DeviceID] = map[uint64]bool{}
			}
			in.got[pk.DeviceID][pk.Seq] = true
			in.n++
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(in.Close)
	return in
}

func (in *reloadIngest) count(device string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.got[device])
}

func (in *reloadIngest) total() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.n
}

func (in *reloadIngest) seqs(into map[uint64]bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range in.got {
		for s := range m {
			into[s] = true
		}
	}
}

// TestReloadSIGHUP runs the daemon in-process and reloads its site file
// with a real SIGHUP: a device added, the upstream replaced by another, an
// invalid file refused (and the running configuration kept), a change that
// needs a restart refused; then checks that no stored packet was lost.
func TestReloadSIGHUP(t *testing.T) {
	_, emu := serve(t, false, "generic-wind-speed", "generic-tipping-bucket-rain")
	a, b := newReloadIngest(t), newReloadIngest(t)
	dir := t.TempDir()
	bufPath := filepath.Join(dir, "buf.db")
	site := filepath.Join(dir, "site.yaml")
	listen := "127.0.0.1:0" // the gateway's choice, read back from its log
	selectorName := "round_robin"
	write := func(devices, upstream, extra string) {
		t.Helper()
		src := fmt.Sprintf(`site: {id: "R1"}
gateway: {id: gw-reload}
buses:
  - name: field
    url: tcp://%s
    timeout: 500ms
    devices:
%smetrics: {listen: "%s"}
buffer: {path: %s}
uplink:
  selector: %s
  probe: {interval: 200ms, timeout: 100ms}
  upstreams:
    - {url: "%s"}
%s`, emu, devices, listen, bufPath, selectorName, upstream, extra)
		if err := os.WriteFile(site, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wind := "      - {name: wind-1, profile: generic-wind-speed, slave: 1, interval: 100ms}\n"
	rain := "      - {name: rain-1, profile: generic-tipping-bucket-rain, slave: 2, interval: 100ms}\n"
	write(wind, a.URL, "")

	g := e2eStartGateway(t, site, io.Discard, "info")
	metricsAddr := testtool.MetricsAddr(t, g.stderr.String)
	testtool.WaitFor(t, 30*time.Second, "upstream A to receive wind-1", func() bool {
		return a.count("wind-1") >= 5 && strings.Contains(g.stderr.String(), "gateway running")
	})
	hup := func(want string, n int) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testtool.WaitFor(t, 30*time.Second, fmt.Sprintf("%q in the log %d times", want, n), func() bool {
			return strings.Count(g.stderr.String(), want) >= n
		})
	}

	// 1. Add rain-1 and move from upstream A to upstream B.
	selector := func() string {
		_, body, err := testtool.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err.Error()
		}
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "fieldlink_selector_info{") {
				return l
			}
		}
		return ""
	}
	if got := selector(); got != `fieldlink_selector_info{selector="round_robin"} 1` {
		t.Errorf("before the reload: %q", got)
	}
	selectorName = "soa"
	write(wind+rain, b.URL, "")
	hup("site file reloaded", 1)
	if got := selector(); got != `fieldlink_selector_info{selector="soa"} 1` {
		t.Errorf("after a reload to soa: %q", got)
	}
	testtool.WaitFor(t, 30*time.Second, "upstream B to receive rain-1 and wind-1", func() bool {
		return b.count("rain-1") >= 5 && b.count("wind-1") >= 5
	})
	aAfter := a.total()
	time.Sleep(500 * time.Millisecond)
	if got := a.total(); got != aAfter {
		t.Errorf("upstream A, removed, still received %d packets", got-aAfter)
	}
	if a.count("rain-1") != 0 {
		t.Errorf("upstream A received rain-1, added after it was removed")
	}

	// 2. An invalid file is refused with its file, line and field, and
	// the running configuration stays: B keeps receiving both devices.
	write(wind+rain, b.URL, "  windw: 64\n")
	hup("site file refused; the running configuration stays in force", 1)
	// The errors follow the refusal's line: wait for them, not a moment.
	testtool.WaitFor(t, 10*time.Second, "the refusal to name the file, line and key (site.yaml:17:3: uplink.windw)", func() bool {
		return strings.Contains(g.stderr.String(), "site.yaml:17:3: uplink.windw")
	})
	before := b.count("rain-1")
	testtool.WaitFor(t, 30*time.Second, "B to keep receiving rain-1 after the refused reload", func() bool {
		return b.count("rain-1") >= before+5
	})

	// 3. A change that needs a restart is refused as a whole: the device
	// removed in the same file keeps being polled.
	write(wind, b.URL, "")
	src, _ := os.ReadFile(site)
	if err := os.WriteFile(site, bytes.Replace(src, []byte("buffer: {path: "), []byte("buffer: {durability: interval, path: "), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	hup("a restart is needed to apply it", 1)
	before = b.count("rain-1")
	testtool.WaitFor(t, 30*time.Second, "rain-1 to stay polled", func() bool { return b.count("rain-1") >= before+5 })

	// 4. Stop; every stored seq reached an upstream or is still buffered.
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	left, _, st := e2eLeftInBuffer(t, bufPath)
	seen := map[uint64]bool{}
	a.seqs(seen)
	b.seqs(seen)
	var missing []uint64
	for s := uint64(1); s <= st.LastSeq; s++ {
		if !seen[s] && !left[s] {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d seqs lost across the reloads: %v", len(missing), st.LastSeq, e2eHead(missing, 20))
	}
	t.Logf("%d packets stored, %d delivered to A, %d to B, %d left in the buffer", st.LastSeq, a.total(), b.total(), len(left))
}
