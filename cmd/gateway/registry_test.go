package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// An upstream known only from the registry receives packets; after a
// restart with the registry gone, the saved list still serves.
func TestRegistryUpstreamsSurviveRegistryOutage(t *testing.T) {
	var got atomic.Int64
	ingest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got.Add(int64(bytes.Count(body, []byte(`"DataHead"`))))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ingest.Close()
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"upstreams":[{"url":%q,"weight":2}]}`, ingest.URL+"/api/packets")
	}))
	_, addr := serve(t, false, "generic-mine-methane")
	dir := t.TempDir()
	site := testtool.SiteFile{
		Site: `{id: "M1", id_field: MineId}`, Gateway: "gw-reg", Buffer: "buf.db", Bus: "tcp://" + addr,
		Devices: []string{"{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}"},
		Uplink:  []string{"probe: {interval: 200ms, timeout: 100ms}", fmt.Sprintf("registry: {url: %q, refresh: 1s}", reg.URL)},
	}.Write(t, dir)
	run := func(until func() bool) string {
		ctx, cancel := context.WithCancel(context.Background())
		var errb testtool.SyncBuffer
		done := make(chan error, 1)
		go func() { done <- cmdRun(ctx, []string{"-c", site, "-log-level", "info"}, io.Discard, &errb) }()
		testtool.WaitFor(t, 20*time.Second, "packets at the registry's upstream", until)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v\n%s", err, errb.String())
		}
		return errb.String()
	}
	logs := run(func() bool { return got.Load() >= 5 })
	if !strings.Contains(logs, "registry added an upstream") {
		t.Fatalf("logs:\n%s", logs)
	}
	if _, err := os.Stat(filepath.Join(dir, "buf.db.registry.json")); err != nil {
		t.Fatalf("registry list not saved: %v", err)
	}
	reg.Close()
	before := got.Load()
	logs = run(func() bool { return got.Load() >= before+5 })
	if !strings.Contains(logs, "upstreams from the saved registry list") {
		t.Fatalf("second run did not use the saved list:\n%s", logs)
	}
}
