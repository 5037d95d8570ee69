package agent

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// Serve runs the daemon's life: packets go to Stdout as JSON lines
// without an uplink, a reload of a broken file is refused with its errors in the log
// and the gateway goes on, and the end of ctx stops it cleanly.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	c := loadSiteFile(t, dir, mineSite("gw-serve", emulate(t, "generic-mine-methane"), "").String())
	var logs testtool.SyncBuffer
	var out testtool.SyncBuffer
	packets := func() int { return strings.Count(out.String(), `"DataHead"`) }
	reload := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, c, ServeOptions{
			File: c.File, Profiles: profiles, Reload: reload,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Stdout: &out,
		})
	}()
	testtool.WaitFor(t, 10*time.Second, "packets as JSON lines on Stdout", func() bool { return packets() > 0 })

	if err := os.WriteFile(c.File, []byte(strings.Replace(mustReadFile(t, c.File), "interval: 100ms", "interval: often", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	reload <- syscall.SIGHUP
	testtool.WaitFor(t, 10*time.Second, "the reload's refusal in the log", func() bool {
		return strings.Contains(logs.String(), "site file refused") && strings.Contains(logs.String(), "often")
	})
	before := packets()
	testtool.WaitFor(t, 10*time.Second, "packets after the refused reload", func() bool { return packets() > before })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30s of its context's end")
	}
	if !strings.Contains(logs.String(), "gateway stopped") {
		t.Errorf("no \"gateway stopped\" in the log:\n%s", logs.String())
	}
}

// A reload whose site file has errors is refused before the agent sees
// the file: the status page must still know, with the first errors, as
// the refused reload above everything else.
func TestReloadRefusedFileOnStatus(t *testing.T) {
	dir := t.TempDir()
	c := loadSiteFile(t, dir, mineSite("gw-refuse", emulate(t, "generic-mine-methane"), "").String())
	g, err := Start(c, Options{Logger: testtool.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	bad := strings.Replace(strings.Replace(mustReadFile(t, c.File), "slave: 1", "slave: 1, windw: 3", 1), "interval: 100ms", "interval: often", 1)
	if err := os.WriteFile(c.File, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	g.reloadFile(c.File, profiles, testtool.Logger(t))
	r := g.Sources().Identity().LastReload
	if r == nil {
		t.Fatal("a refused reload is recorded nowhere: last_reload is nil")
	}
	if r.At.IsZero() || !strings.Contains(r.Err, "windw") || !strings.Contains(r.Err, "often") || !strings.Contains(r.Err, "site.yaml:") {
		t.Errorf("refused reload %+v: want its time and its first errors with file and line", r)
	}
}

func mustReadFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
