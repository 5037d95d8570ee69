package loopback

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
)

// TestProcessSlowNode is the slow-node case with real gateway processes:
// `gateway run` built from this tree, polling emulated methane sensors and
// delivering to four HTTP upstreams, one of which turns 300 ms slow for the
// middle of each block. Strategies alternate A-B-C-D then D-C-B-A, one
// process per block. What it compares is what the gateway itself reports
// (its upstream latency histogram) and what the upstreams received: the
// slow upstream's share of the packets while slow, and the mean delivery
// latency. The lab's S2 orders drf_cswlc before prequal on both. Long mode
// only (LOOPBACK_LONG=1): a minute and a half of wall time.
func TestProcessSlowNode(t *testing.T) {
	if os.Getenv("LOOPBACK_LONG") != "1" {
		t.Skip("LOOPBACK_LONG=1 runs the real-process check (a minute and a half)")
	}
	bin := testtool.BuildGateway(t)
	names := make([]string, 10)
	for i := range names {
		names[i] = "generic-mine-methane"
	}
	_, addr := emutest.Serve(t, false, names...)

	var slow atomic.Bool
	var during [4]atomic.Int64 // packets received while the slow one is slow
	ups := make([]*httptest.Server, 4)
	for i := range ups {
		ups[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if i == 2 && slow.Load() {
				time.Sleep(300 * time.Millisecond)
			}
			if slow.Load() {
				during[i].Add(int64(bytes.Count(body, []byte(`"DataHead"`))))
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(ups[i].Close)
	}

	strategies := []string{"drf_cswlc", "prequal", "soa", "p2c_ewma"}
	order := append(append([]string{}, strategies...), strategies[3], strategies[2], strategies[1], strategies[0])
	share := map[string][]float64{}
	mean := map[string][]float64{}
	for k, st := range order {
		for i := range during {
			during[i].Store(0)
		}
		dir := t.TempDir()
		var b strings.Builder
		fmt.Fprintf(&b, "site: {id: \"M1\", id_field: MineId}\ngateway: {id: gw-proc}\nbuffer: {path: buf.db}\nmetrics: {listen: \"127.0.0.1:0\"}\n")
		fmt.Fprintf(&b, "buses:\n  - name: b\n    url: tcp://%s\n    devices:\n", addr)
		for i := range names {
			fmt.Fprintf(&b, "      - {name: ch4-%d, profile: generic-mine-methane, slave: %d, interval: 100ms}\n", i+1, i+1)
		}
		fmt.Fprintf(&b, "uplink:\n  selector: %s\n  probe: {interval: 200ms, timeout: 100ms}\n  batch: 5\n  upstreams:\n", st)
		for _, u := range ups {
			fmt.Fprintf(&b, "    - url: %s/ingest\n", u.URL)
		}
		site := filepath.Join(dir, "site.yaml")
		if err := os.WriteFile(site, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "run", "-c", site, "-log-level", "info") // info: where the metrics listen
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		var stderr testtool.SyncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		metricsAddr, err := testtool.MetricsListening(stderr.String, nil)
		if err != nil {
			cancel()
			_ = cmd.Wait()
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second) // warm-up: the block's own schedule, not synchronisation
		slow.Store(true)
		time.Sleep(6 * time.Second)
		slow.Store(false)
		time.Sleep(time.Second)
		sum, count := scrapeLatency(t, metricsAddr)
		cancel()
		_ = cmd.Wait()
		var total int64
		for i := range during {
			total += during[i].Load()
		}
		if total == 0 || count == 0 {
			t.Fatalf("block %d (%s): nothing delivered (%d packets, %v deliveries)\n%s", k, st, total, count, stderr.String())
		}
		share[st] = append(share[st], float64(during[2].Load())/float64(total))
		mean[st] = append(mean[st], sum/count)
		t.Logf("block %d %-10s slow share %5.1f%% of %d packets, mean delivery %6.1f ms", k, st,
			100*float64(during[2].Load())/float64(total), total, 1000*sum/count)
	}
	avg := func(v []float64) float64 {
		var s float64
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	for _, st := range strategies {
		t.Logf("%-10s slow share %5.1f%%, mean delivery %6.1f ms (mean of %d blocks)", st, 100*avg(share[st]), 1000*avg(mean[st]), len(share[st]))
	}
	// The lab's S2 ordering: drf_cswlc sends less to the slow node and
	// delivers faster than prequal.
	if avg(share["drf_cswlc"]) >= avg(share["prequal"]) {
		t.Errorf("slow share: drf_cswlc %.1f%% is not below prequal's %.1f%%", 100*avg(share["drf_cswlc"]), 100*avg(share["prequal"]))
	}
	if avg(mean["drf_cswlc"]) >= avg(mean["prequal"]) {
		t.Errorf("mean delivery: drf_cswlc %.1f ms is not below prequal's %.1f ms", 1000*avg(mean["drf_cswlc"]), 1000*avg(mean["prequal"]))
	}
}

// scrapeLatency sums the gateway's upstream latency histograms: seconds and
// deliveries, over every upstream.
func scrapeLatency(t *testing.T, addr string) (sum, count float64) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, rest, _ := strings.Cut(line, " ")
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, "fieldlink_upstream_latency_seconds_sum"):
			sum += v
		case strings.HasPrefix(name, "fieldlink_upstream_latency_seconds_count"):
			count += v
		}
	}
	return sum, count
}
