package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fieldlink/config"
	"fieldlink/internal/testtool"
)

func sha(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// The status page's site facts: the hash of the site file in force, a
// file changed on disk and not reloaded, and the outcome of each reload.
func TestStatusSiteFileAndReloads(t *testing.T) {
	up := newIngest(t, http.StatusNoContent)
	c := site(t, emulate(t, "generic-mine-methane"), "uplink:\n  upstreams:\n    - url: "+up.URL+"/ingest\n")
	g, err := Start(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	src := g.Sources()
	si := src.Identity()
	if si.SiteID != "M1" || si.GatewayID != "gw-agent" || si.Started.IsZero() || si.ConfigFile != c.File ||
		si.ConfigSHA256 != sha(t, c.File) || si.OnDiskSHA256 != si.ConfigSHA256 || si.LastReload != nil {
		t.Fatalf("site info at the start: %+v", si)
	}
	if len(src.Readings(si.Started)) != len(c.Profiles["generic-mine-methane"].Registers) {
		t.Errorf("readings: %v", src.Readings(si.Started))
	}
	if src.Disk == nil {
		t.Error("no disk source for a site with a buffer")
	} else if d, ok := src.Disk(); !ok || d.Total == 0 || d.Free > d.Total {
		t.Errorf("disk %+v %v", d, ok)
	}

	// Edited on disk, not reloaded: the page can tell.
	old, err := os.ReadFile(c.File)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(old), "interval: 100ms", "interval: 200ms", 1)
	if err := os.WriteFile(c.File, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	si = src.Identity()
	if si.OnDiskSHA256 != sha(t, c.File) || si.OnDiskSHA256 == si.ConfigSHA256 {
		t.Errorf("after an edit: in force %s, on disk %s", si.ConfigSHA256, si.OnDiskSHA256)
	}

	// Reloaded: in force again, and applied.
	c2, err := config.Load(c.File, profiles)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(c2); err != nil {
		t.Fatal(err)
	}
	si = src.Identity()
	if si.ConfigSHA256 != sha(t, c.File) || si.OnDiskSHA256 != si.ConfigSHA256 || si.LastReload == nil || si.LastReload.Err != "" {
		t.Errorf("after a reload: %+v (reload %+v)", si, si.LastReload)
	}

	// Refused: the reason is kept, the file in force stays.
	c3, err := config.Load(c.File, profiles)
	if err != nil {
		t.Fatal(err)
	}
	c3.Buffer.Path = filepath.Join(t.TempDir(), "elsewhere.db")
	if err := g.Reload(c3); !errors.Is(err, ErrRestartNeeded) {
		t.Fatalf("reload of another buffer: %v", err)
	}
	si = src.Identity()
	if si.LastReload == nil || !strings.Contains(si.LastReload.Err, "restart") || si.ConfigSHA256 != sha(t, c.File) {
		t.Errorf("after a refused reload: %+v (reload %+v)", si, si.LastReload)
	}
}

// With allow_remote the page takes a token, created at the first start
// into a file only its owner reads; the log says where it is, never the
// token itself (whoever reads the journal must not get it). A token file that cannot be written leaves
// the page to loopback clients.
func TestMetricsHandlerToken(t *testing.T) {
	c := site(t, emulate(t, "generic-mine-methane"), "")
	c.Metrics.AllowRemote = true
	c.Metrics.TokenFile = filepath.Join(t.TempDir(), "status-token")
	g, err := Start(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()

	var first testtool.SyncBuffer
	h := MetricsHandler(c, g.Sources(), slog.New(slog.NewTextHandler(&first, nil)))
	b, err := os.ReadFile(c.Metrics.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(b))
	if fi, _ := os.Stat(c.Metrics.TokenFile); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode())
	}
	if strings.Contains(first.String(), tok) || !strings.Contains(first.String(), c.Metrics.TokenFile) {
		t.Errorf("first start's log gives the token, or not its file:\n%s", first.String())
	}
	var second testtool.SyncBuffer
	h2 := MetricsHandler(c, g.Sources(), slog.New(slog.NewTextHandler(&second, nil)))
	if strings.Contains(second.String(), tok) || !strings.Contains(second.String(), c.Metrics.TokenFile) {
		t.Errorf("second start's log:\n%s", second.String())
	}

	get := func(h http.Handler, remote, auth string) int {
		r := httptest.NewRequest(http.MethodGet, "/status.json", nil)
		r.RemoteAddr = remote
		if auth != "" {
			r.Header.Set("Authorization", "Bearer "+auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			testtool.ValidStatus(t, w.Body.Bytes())
		}
		return w.Code
	}
	for _, hh := range []http.Handler{h, h2} {
		if code := get(hh, "192.0.2.1:1000", ""); code != http.StatusUnauthorized {
			t.Errorf("LAN client without the token: %d", code)
		}
		if code := get(hh, "192.0.2.1:1000", tok); code != http.StatusOK {
			t.Errorf("LAN client with the token: %d", code)
		}
		if code := get(hh, "127.0.0.1:1000", ""); code != http.StatusOK {
			t.Errorf("loopback client: %d", code)
		}
	}

	c.Metrics.TokenFile = filepath.Join(t.TempDir(), "no-such-dir", "status-token")
	var broken testtool.SyncBuffer
	h3 := MetricsHandler(c, g.Sources(), slog.New(slog.NewTextHandler(&broken, nil)))
	if !strings.Contains(broken.String(), "loopback only") {
		t.Errorf("unwritable token file, log:\n%s", broken.String())
	}
	if code := get(h3, "192.0.2.1:1000", tok); code != http.StatusUnauthorized {
		t.Errorf("unwritable token file, LAN client: %d", code)
	}
	if code := get(h3, "127.0.0.1:1000", ""); code != http.StatusOK {
		t.Errorf("unwritable token file, loopback client: %d", code)
	}
}

// A site without an uplink has no buffer, so no disk to report.
func TestStatusNoDiskWithoutBuffer(t *testing.T) {
	g, err := Start(site(t, emulate(t, "generic-mine-methane"), ""), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if src := g.Sources(); src.Disk != nil || src.Readings == nil || src.Identity == nil {
		t.Errorf("sources without an uplink: disk %v, readings %v, site %v", src.Disk != nil, src.Readings != nil, src.Identity != nil)
	}
}
