package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// gateway run serves Prometheus metrics, /healthz and /readyz.
func TestRunServesMetricsAndHealth(t *testing.T) {
	_, addr := serve(t, false, "generic-mine-methane")
	sf := mineSite(filepath.Join(t.TempDir(), "buf.db"), addr, `{url: "http://127.0.0.1:1/ingest"}`)
	sf.Gateway, sf.Metrics = "gw-m", "127.0.0.1:0"
	sf.Devices[0] = "{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}"
	site := sf.Write(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var log testtool.SyncBuffer
	go func() { done <- cmdRun(ctx, []string{"-c", site, "-log-level", "info"}, io.Discard, &log) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	listen := testtool.MetricsAddr(t, log.String)
	get := func(path string) (int, string) {
		code, body, err := testtool.Get("http://" + listen + path)
		if err != nil {
			return 0, err.Error()
		}
		return code, body
	}
	testtool.WaitFor(t, 10*time.Second, "/readyz to say ready", func() bool { code, _ := get("/readyz"); return code == 200 })
	if code, body := get("/healthz"); code != 200 || body != "ok\n" && body != "ok" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	testtool.WaitFor(t, 10*time.Second, "metrics of the device, buffer and upstream", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `fieldlink_device_health{bus="field",device="ch4-1",state="ok"} 1`) &&
			strings.Contains(body, `fieldlink_buffer_records{kind="normal"}`) &&
			strings.Contains(body, `fieldlink_upstream_up{upstream=`) &&
			strings.Contains(body, `fieldlink_selector_info{selector="drf_cswlc"} 1`) &&
			strings.Contains(body, `fieldlink_selector_fallbacks_total{selector="drf_cswlc"} 0`)
	})
}

// Under systemd (Type=notify), gateway run says READY=1 once it polls,
// feeds the watchdog, and says STOPPING=1 on its way out.
func TestRunNotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	_, addr := serve(t, false, "generic-mine-methane")
	site := testtool.SiteFile{
		Site: `{id: "M1", id_field: MineId}`, Gateway: "gw-s", Metrics: "off", Bus: "tcp://" + addr,
		Devices: []string{"{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}"},
	}.Write(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmdRun(ctx, []string{"-c", site, "-log-level", "warn"}, io.Discard, io.Discard) }()
	got := map[string]int{}
	buf := make([]byte, 256)
	deadline := time.Now().Add(10 * time.Second)
	for got["READY=1"] == 0 || got["WATCHDOG=1"] < 2 {
		_ = conn.SetReadDeadline(deadline)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("notifications so far %v: %v", got, err)
		}
		got[string(buf[:n])]++
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for got["STOPPING=1"] == 0 {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no STOPPING=1 (got %v): %v", got, err)
		}
		got[string(buf[:n])]++
	}
}
