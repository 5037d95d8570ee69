package status

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"fieldlink/buffer/cardstore"
	"fieldlink/internal/testtool"
	"fieldlink/metrics"
	"fieldlink/sensors"
)

// Every text from the sources is escaped: a device, point, upstream or
// error that carries markup shows as text.
func TestPageEscapes(t *testing.T) {
	f := newFake()
	evil := `<script>alert(1)</script>"'&`
	f.devs[0].Name, f.readings[0].Device, f.readings[0].Name, f.readings[0].Unit = evil, evil, evil, evil
	f.devs[1].LastError = evil
	f.ups[0].Name = evil
	f.site.SiteID, f.site.ConfigFile = evil, evil
	f.downlink = &DownlinkStatus{Enabled: true, Commands: []DownlinkCommand{{At: t0, Device: evil, Command: evil, Result: evil}}}
	now := t0
	s := server(f, &now)
	for _, path := range []string{"/", "/?fragment=1"} {
		page := body(t, get(t, metrics.NewHandler(nil, metrics.HandlerOptions{Pages: s.Pages()}), path))
		if strings.Contains(page, "<script>alert") || strings.Contains(page, `"'&`) {
			t.Errorf("%s: markup from the sources is not escaped", path)
		}
		if n := strings.Count(page, "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&amp;"); n < 8 {
			t.Errorf("%s: the escaped text shows %d times, want at least 8", path, n)
		}
	}
}

// The page's headers: a strict Content-Security-Policy whose hashes match
// the inlined style and script, no caching; gzip when asked; HEAD gives
// the headers only.
func TestPageHeaders(t *testing.T) {
	f := newFake()
	now := t0
	h := metrics.NewHandler(nil, metrics.HandlerOptions{Pages: server(f, &now).Pages()})
	resp := get(t, h, "/")
	page := body(t, resp)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src " + metrics.CSPHash(pageScript), "style-src " + metrics.CSPHash(pageStyle), "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if !strings.Contains(page, "<script>"+pageScript+"</script>") || !strings.Contains(page, "<style>"+pageStyle+"</style>") {
		t.Error("the page does not inline exactly the hashed script and style")
	}
	if strings.Contains(page, "src=") || strings.Contains(page, "href=\"http") || strings.Contains(page, "@import") {
		t.Error("the page loads something from elsewhere")
	}
	if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", resp.Header)
	}

	resp = get(t, h, "/", "Accept-Encoding", "br, gzip;q=0.8")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding gzip: Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !strings.Contains(string(unzipped), `data-device="ch4-1"`) {
		t.Errorf("gzipped page: %v", err)
	}
	if resp := get(t, h, "/", "Accept-Encoding", "gzip;q=0"); resp.Header.Get("Content-Encoding") != "" {
		t.Error("gzip;q=0 answered with gzip")
	}

	r := httptest.NewRequest(http.MethodHead, "/status.json", nil)
	r.RemoteAddr = "127.0.0.1:1"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") == "" {
		t.Errorf("HEAD /status.json: %d, %d bytes, Content-Length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}

	frag := body(t, get(t, h, "/?fragment=1"))
	if strings.Contains(frag, "<html") || strings.Contains(frag, "<script") || !strings.Contains(frag, `data-device="ch4-1"`) {
		t.Errorf("fragment: %.200s", frag)
	}
}

// What needs a look comes first: a clock that was never set, a site file
// changed on disk, a refused reload; and with "errors only" a site where
// all is well says so.
func TestAlerts(t *testing.T) {
	f := newFake()
	f.site.OnDiskSHA256 = strings.Repeat("cd", 32)
	f.site.LastReload = &ReloadResult{At: t0.Add(-time.Minute), Err: "a restart is needed to apply it; changed: buffer"}
	now := t0
	s := New(f.sources(), Options{Now: func() time.Time { return now }, Clock: func(now time.Time) Clock {
		return Clock{Now: now, Synchronised: ptr(false), Problem: ptr("not synchronised")}
	}})
	page := body(t, get(t, metrics.NewHandler(nil, metrics.HandlerOptions{Pages: s.Pages()}), "/"))
	i := strings.Index(page, `id=alerts`)
	if i < 0 || i > strings.Index(page, `data-device=`) {
		t.Fatalf("no alerts before the devices:\n%s", page)
	}
	for _, want := range []string{"Clock: not synchronised", "Fix the site file", "a restart is needed to apply it; changed: buffer"} {
		if !strings.Contains(page[i:], want) {
			t.Errorf("alerts lack %q", want)
		}
	}
	// Changed on disk with no refused reload: reload it.
	f.site.LastReload = nil
	if page := string(renderMain(s.Snapshot())); !strings.Contains(page, "differs from the one in force: reload it") {
		t.Errorf("a site file changed on disk and not reloaded is not said:\n%s", page)
	}
	f.site.LastReload = &ReloadResult{At: t0.Add(-time.Minute), Err: "a restart is needed to apply it; changed: buffer"}
	snap := s.Snapshot()
	if !snap.Site.Config.Changed || snap.Site.LastReload == nil || snap.Site.LastReload.Applied {
		t.Errorf("site %+v", snap.Site)
	}

	well := newFake()
	well.devs, well.readings = well.devs[:1], well.readings[:1]
	well.ups = well.ups[:1]
	s = server(well, &now)
	page = body(t, get(t, metrics.NewHandler(nil, metrics.HandlerOptions{Pages: s.Pages()}), "/?errors=1"))
	if !strings.Contains(page, `class="errors-only "`) || !strings.Contains(page, "Nothing needs a look") || strings.Contains(page, "id=alerts") {
		t.Errorf("a well site with errors only:\n%s", page)
	}
}

// A card that fails is said first, in words, with what the buffer does
// meanwhile, in the page and in status.json; a well card says nothing.
func TestCardNotDurable(t *testing.T) {
	f := newFake()
	now := t0
	well := server(f, &now).Snapshot()
	if b := well.Buffer; !b.Durable || b.Durability != "ok" || b.DurabilityProblem != nil || strings.Contains(string(renderMain(well)), "durable") {
		t.Fatalf("a well card: %+v", b)
	}
	f.durable = &cardstore.State{Fault: cardstore.ReadOnly, Words: "buffer not durable: the card is read-only", Since: t0.Add(-time.Minute), Volatile: 12}
	s := server(f, &now)
	doc := body(t, get(t, metrics.NewHandler(nil, metrics.HandlerOptions{Pages: s.Pages()}), "/status.json"))
	testtool.ValidStatus(t, []byte(doc))
	var got struct{ Buffer map[string]any }
	if err := json.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"durable": false, "durability": "read_only", "durability_problem": "buffer not durable: the card is read-only",
		"durability_since": "2026-11-30T07:59:00Z", "volatile": 12.0}
	for k, v := range want {
		if got.Buffer[k] != v {
			t.Errorf("status.json buffer.%s = %v, want %v", k, got.Buffer[k], v)
		}
	}
	page := string(renderMain(s.Snapshot()))
	i := strings.Index(page, "id=alerts")
	if i < 0 || !strings.Contains(page[i:], "buffer not durable: the card is read-only; live readings go upstream from memory (12 packets waiting there, lost by a power cut) until the card recovers") {
		t.Fatalf("the page does not say it first:\n%s", page)
	}
	if strings.Contains(page, "Nothing needs a look") {
		t.Error("a failing card: nothing needs a look")
	}
}

// The downlink has its section once its source is set, and none before.
func TestDownlinkHook(t *testing.T) {
	f := newFake()
	now := t0
	if snap := server(f, &now).Snapshot(); snap.Downlink != nil || strings.Contains(string(renderMain(snap)), "id=downlink") {
		t.Error("a downlink shown for a gateway without one")
	}
	f.downlink = &DownlinkStatus{Enabled: true, Commands: []DownlinkCommand{
		{At: t0.Add(-time.Minute), Device: "pump-1", Command: "write coil 3 = on", OK: true, Result: "done"},
		{At: t0.Add(-2 * time.Minute), Device: "pump-2", Command: "write coil 1 = off", Result: "refused: not in the allow list"},
	}}
	snap := server(f, &now).Snapshot()
	if snap.Downlink == nil || !snap.Downlink.Enabled || len(snap.Downlink.Commands) != 2 || snap.Downlink.Commands[1].OK {
		t.Fatalf("downlink %+v", snap.Downlink)
	}
	page := string(renderMain(snap))
	for _, want := range []string{"id=downlink", "write coil 3 = on", "refused: not in the allow list"} {
		if !strings.Contains(page, want) {
			t.Errorf("downlink section lacks %q", want)
		}
	}
}

// The page of a large site stays under 100 KB: a phone on a weak link.
func TestPageSizeAt50Devices(t *testing.T) {
	f := fifty()
	now := t0
	h := metrics.NewHandler(nil, metrics.HandlerOptions{Pages: server(f, &now).Pages()})
	page := body(t, get(t, h, "/"))
	zipped := get(t, h, "/", "Accept-Encoding", "gzip")
	z := body(t, zipped)
	t.Logf("page at 50 devices × 5 points: %d bytes, %d gzipped; script %d, style %d", len(page), len(z), len(pageScript), len(pageStyle))
	if len(page) >= 100_000 {
		t.Errorf("page at 50 devices: %d bytes, want under 100 KB", len(page))
	}
	if n := strings.Count(page, "data-device="); n != 50 {
		t.Errorf("%d devices in the page, want 50", n)
	}
}

// The points are read a moment after the devices' status; a poll that
// ends in between cannot make the page show a good point on a device it
// shows failing.
func TestPointsFollowTheStatusShown(t *testing.T) {
	f := newFake()
	f.devs[0].Health, f.devs[0].ConsecutiveFailures = sensors.Degraded, 1 // the point is still good
	now := t0
	snap := server(f, &now).Snapshot()
	p := snap.Devices[0].Points[0]
	if p.Quality != "stale" || p.Value != nil || p.LastValue == nil || *p.LastValue != "0.42" {
		t.Errorf("good point of a device shown degraded: %+v", p)
	}
	f.devs[0].Health = sensors.Offline
	if p := server(f, &now).Snapshot().Devices[0].Points[0]; p.Quality != "bad" || p.Value != nil {
		t.Errorf("good point of a device shown offline: %+v", p)
	}
}

// A clock before the software was written was never set, whatever NTP
// says; one after it is judged by the kernel's NTP state alone.
func TestSystemClockBeforeItsTime(t *testing.T) {
	boot := time.Date(1970, 1, 1, 0, 3, 0, 0, time.UTC)
	c := SystemClock(boot)
	if !strings.Contains(str(c.Problem), "1970-01-01") || !strings.Contains(str(c.Problem), "never set") || !c.Now.Equal(boot) {
		t.Errorf("clock at 1970: %+v", c)
	}
	c = SystemClock(clockFloor.Add(time.Hour))
	if strings.Contains(str(c.Problem), "never set") {
		t.Errorf("clock after the floor: %+v", c)
	}
	if c.Synchronised != nil && *c.Synchronised != (c.Problem == nil) {
		t.Errorf("synchronised %v with problem %q", *c.Synchronised, str(c.Problem))
	}
}
