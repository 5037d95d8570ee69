package main

import (
	"context"
	"errors"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The commands that read a stopped gateway's buffer (buffer stats and
// export, audit and audit -verify) never create it, nor its directory: run
// with sudo before the service's first start, they would leave root's
// files where the service, as its own user, must create its own. They say
// there is none and exit 1.
func TestReadingCommandsCreateNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "var", "fieldlink", "buf.db")
	site := mineSite(path, "127.0.0.1:1", `{url: "http://127.0.0.1:1/ingest"}`).Write(t, "")
	for _, args := range [][]string{
		{"buffer", "stats"}, {"buffer", "export"}, {"buffer", "export", "-dead"}, {"buffer", "purge", "-yes"},
		{"audit"}, {"audit", "-verify"},
	} {
		code, out, errOut := gw(t, append(args, "-c", site)...)
		if code != 1 || out != "" || !strings.Contains(errOut, "no buffer file at "+path) {
			t.Errorf("%s: %d %q %q; want exit 1 saying there is no buffer file at %s", strings.Join(args, " "), code, out, errOut, path)
		}
		if _, err := os.Stat(filepath.Join(dir, "var")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s created %s/var (%v)", strings.Join(args, " "), dir, err)
		}
	}
}

// A buffer the user may not create says which setting to change, or which
// user the service runs as, not only "permission denied".
func TestRunWithABufferItMayNotCreate(t *testing.T) {
	sf := mineSite("/sys/fieldlink-test/buf.db", "127.0.0.1:1", `{url: "mqtt://127.0.0.1:1"}`)
	sf.Metrics = "off"
	site := sf.Write(t, "")
	code, _, errOut := gw(t, "run", "-c", site)
	if code != 1 || !strings.Contains(errOut, "not permitted") || !strings.Contains(errOut, "buffer.path") || !strings.Contains(errOut, "the fieldlink user") {
		t.Fatalf("run: %d %s", code, errOut)
	}
}

// gateway buffer stats|export|purge on a buffer left by a run whose only
// upstream was down.
func TestBufferCommands(t *testing.T) {
	_, addr := serve(t, false, "generic-mine-methane")
	dir := t.TempDir()
	sf := mineSite(filepath.Join(dir, "buf.db"), addr, `{url: "http://127.0.0.1:1/ingest"}`)
	sf.Devices[0] = "{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}"
	sf.Uplink = append([]string{"probe: {interval: 100ms, timeout: 50ms}"}, sf.Uplink...)
	site := sf.Write(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var errb testtool.SyncBuffer
	go func() { done <- cmdRun(ctx, []string{"-c", site, "-log-level", "warn"}, io.Discard, &errb) }()
	// Once the daemon holds the buffer, stats asks it, and export, which
	// needs the file, refuses and says why.
	var code int
	var out, errOut string
	testtool.WaitFor(t, 20*time.Second, "buffer stats to be read from the running daemon", func() bool {
		code, out, _ = gw(t, "buffer", "stats", "-c", site)
		return code == 0 && strings.Contains(out, "the running daemon")
	})
	code, _, errOut = gw(t, "buffer", "export", "-c", site)
	if code != 1 || !strings.Contains(errOut, "the gateway is running: it holds ") || !strings.Contains(errOut, "/status.json") || strings.Contains(errOut, "in use by another gateway process?") {
		t.Errorf("export while the daemon runs: %d %q", code, errOut)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	code, out, errOut = gw(t, "buffer", "stats", "-c", site)
	if code != 0 || !strings.Contains(out, "no daemon runs") || !strings.Contains(out, "depth") || strings.Contains(out, "depth                0 ") {
		t.Fatalf("stats: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = gw(t, "buffer", "export", "-c", site)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 3 {
		t.Fatalf("export: %d %q", code, out)
	}
	var last uint64
	for _, l := range lines {
		testtool.ValidPacket(t, []byte(l))
		p, err := packet.Decode([]byte(l))
		if err != nil || p.Seq <= last || p.Epoch == "" {
			t.Fatalf("export line %q: %v (seq after %d)", l, err, last)
		}
		last = p.Seq
	}
	if code, _, errOut := gw(t, "buffer", "purge", "-c", site); code == 0 || !strings.Contains(errOut, "-yes") {
		t.Fatalf("purge without -yes: %d %s", code, errOut)
	}
	if code, _, errOut := gw(t, "buffer", "purge", "-c", site, "-yes"); code != 0 || !strings.Contains(errOut, fmt.Sprintf("purged %d packets", len(lines))) {
		t.Fatalf("purge: %d %s", code, errOut)
	}
	if _, out, _ := gw(t, "buffer", "export", "-c", site); out != "" {
		t.Fatalf("export after purge: %q", out)
	}
}
