package agent

import (
	"fmt"
	"log/slog"
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

// A token_file corrected and reloaded is used: the site file is the same,
// but the uplink must be rebuilt with the file's new content. The upstream
// stands in for InfluxDB 2.x, which checks "Authorization: Token …" (the
// InfluxDB 1.6 of the other tests has no tokens): 401 for any other.
func TestReloadRereadsTheTokenFile(t *testing.T) {
	var refused, taken atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Token right-t0ken" {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":"unauthorized","message":"unauthorized access"}`))
			return
		}
		taken.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	dir := t.TempDir()
	token := filepath.Join(dir, "influx.token")
	if err := os.WriteFile(token, []byte("wrong-t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := mineSite("gw-token", emulate(t, "generic-mine-methane"), fmt.Sprintf(`uplink:
  upstreams:
    - {url: "%s/api/v2/write?org=farm&bucket=farm", encoding: influx_line, token_file: influx.token}
`, srv.URL)).String()
	c := loadSiteFile(t, dir, src)
	log := &testtool.SyncBuffer{}
	g, err := Start(c, Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer stopWithin(t, g, 30*time.Second)
	testtool.WaitFor(t, 15*time.Second, "a write refused with the wrong token", func() bool { return refused.Load() > 0 })

	if err := os.WriteFile(token, []byte("right-t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(loadSiteFile(t, dir, src)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "nothing to do") {
		t.Errorf("the reload of a corrected token file did nothing:\n%s", log.String())
	}
	testtool.WaitFor(t, 15*time.Second, "a write taken with the corrected token", func() bool { return taken.Load() > 0 })
}
