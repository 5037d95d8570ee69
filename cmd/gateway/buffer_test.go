package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
