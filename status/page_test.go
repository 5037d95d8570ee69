package status

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/metrics"
	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/uplink"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// fake is a site's snapshots, set by each test.
type fake struct {
	devs      []sensors.DeviceStatus
	points    []sensors.Point
	busy      map[string]time.Duration
	delivered map[string]uint64
	ups       []selector.Stats
	site      metrics.Identity
	downlink  *metrics.DownlinkStatus
	buf       buffer.Stats
	durable   *metrics.Durability // nil: no durability source
	// upErr is each upstream's last error in words, at t0 - 5 s;
	// lastDelivered when an upstream last acknowledged a batch.
	upErr         map[string]string
	lastDelivered time.Time
}

func (f *fake) sources() metrics.Sources {
	src := metrics.Sources{
		Devices: func() []sensors.DeviceStatus { return f.devs },
		Points:  func(time.Time) []sensors.Point { return f.points },
		Buses: func() []metrics.BusSample {
			var out []metrics.BusSample
			for _, name := range []string{"a", "b"} {
				out = append(out, metrics.BusSample{Name: name, Busy: f.busy[name]})
			}
			return out
		},
		Modbus: func() map[string]modbus.Stats {
			return map[string]modbus.Stats{"a": {Requests: 10, Timeouts: 1, CRCErrors: 2, Exceptions: 3, FrameErrors: 4, IOErrors: 5}}
		},
		Buffer: func() (buffer.Stats, bool) { return f.buf, true },
		Delivery: func() (uplink.DeliveryStats, bool) {
			st := uplink.DeliveryStats{LastDelivered: f.lastDelivered}
			for _, name := range []string{"mqtt://one:1883", "mqtt://two:1883"} {
				u := uplink.UpstreamCounters{Name: name, Delivered: f.delivered[name]}
				if e := f.upErr[name]; e != "" {
					u.LastError, u.LastErrorAt = e, t0.Add(-5*time.Second)
				}
				st.Upstreams = append(st.Upstreams, u)
				st.Delivered += f.delivered[name]
			}
			return st, true
		},
		Upstreams: func() []selector.Stats { return f.ups },
		Selector:  func() string { return "drf_cswlc" },
		Identity:  func() metrics.Identity { return f.site },
		Disk:      func() (metrics.DiskSpace, bool) { return metrics.DiskSpace{Free: 5 << 30, Total: 8 << 30}, true },
	}
	if f.downlink != nil {
		src.Downlink = func() metrics.DownlinkStatus { return *f.downlink }
	}
	if f.durable != nil {
		src.Durability = func() metrics.Durability { return *f.durable }
	}
	return src
}

func newFake() *fake {
	return &fake{
		devs: []sensors.DeviceStatus{
			{Name: "ch4-1", Bus: "a", Health: sensors.OK, Polls: 10, LastOK: t0.Add(-time.Second), LastDuration: 20 * time.Millisecond},
			{Name: "co-1", Bus: "a", Health: sensors.Offline, Polls: 10, Errors: 4, ConsecutiveFailures: 4, LastError: "timeout", LastOK: t0.Add(-time.Minute)},
			{Name: "sonic-1", Bus: "serial", Health: sensors.Unknown},
		},
		points: []sensors.Point{
			{Device: "ch4-1", Name: "CH4", Unit: "%VOL", Value: packet.Float(0.42, 2), At: t0.Add(-time.Second), Raw: []byte{0, 42}, Quality: sensors.Good},
			{Device: "co-1", Name: "CO", Unit: "ppm", Value: packet.Float(0, 1), At: t0.Add(-time.Minute), Raw: []byte{0, 0}, Quality: sensors.Bad},
			{Device: "sonic-1", Name: "WindSpeed", Unit: "m/s", Quality: sensors.Bad},
		},
		busy:      map[string]time.Duration{},
		delivered: map[string]uint64{},
		buf:       buffer.Stats{Normal: 7, Alarms: 1, OldestSeq: 3, OldestAt: t0.Add(-time.Minute), Bytes: 100, MaxBytes: 1000},
		upErr:     map[string]string{},
		// Delivered a moment ago: the buffer's minute-old packets are not
		// a stall.
		lastDelivered: t0.Add(-time.Second),
		ups: []selector.Stats{
			{Name: "mqtt://one:1883", Up: true, Samples: 3, LatencyMean: 40 * time.Millisecond},
			{Name: "mqtt://two:1883", ConsecutiveFailures: 2, LastFailure: t0.Add(-time.Second), LastTimeout: t0.Add(-time.Second)},
		},
		site: metrics.Identity{SiteID: "M1", GatewayID: "gw-1", Version: "v1.2.3", Started: t0.Add(-time.Hour),
			ConfigFile: "/etc/fieldlink/site.yaml", ConfigSHA256: strings.Repeat("ab", 32), OnDiskSHA256: strings.Repeat("ab", 32)},
	}
}

// server is a Server over f at a clock the test moves.
func server(f *fake, now *time.Time) *Server {
	return New(f.sources(), Options{
		Now:   func() time.Time { return *now },
		Clock: func(now time.Time) Clock { return Clock{Now: now, Synchronised: ptr(true), MaxErrorSecond: ptr(0.01)} },
	})
}

func get(t *testing.T, h http.Handler, path string, header ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "127.0.0.1:1"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSnapshotJSON(t *testing.T) {
	f := newFake()
	now := t0
	h := metrics.NewHandler(f.sources(), metrics.HandlerOptions{Pages: server(f, &now).Pages()})
	resp := get(t, h, "/status.json")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("/status.json: %d %v", resp.StatusCode, resp.Header)
	}
	var m map[string]any
	text := body(t, resp)
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"value": "0.42"`, `"raw": "002a"`, `"unit": "%VOL"`,
		// Read once, offline now: no value, the last reading apart.
		`"value": null,
     "quality": "bad",
     "age_s": 60,`, `"last_value": "0.0"`,
		`"health": "offline"`, `"failures_in_row": 4`, `"why": "no answer: 4 failures in a row, polled less often until it answers; last: timeout"`,
		`"kind": "serial"`, `"health": "unknown"`, `"why": "not polled yet"`,
		`"timeout": 1`, `"crc": 2`, `"exception": 3`, `"framing": 4`, `"io": 5`, `"state": "degraded"`,
		`"last_round_trip_s": 0.02`, `"last_round_trip_device": "ch4-1"`,
		`"waiting": 8`, `"oldest_age_s": 60`, `"disk_free": 5368709120`,
		`"selector": "drf_cswlc"`, `"state": "up"`, `"state": "down"`, `"latency_s": 0.04`, `"last_failure_timeout": true`,
		`"version": "v1.2.3"`, `"uptime_s": 3600`, `"changed": false`, `"last_reload": null`, `"synchronised": true`,
		`"downlink": null`,
		`"devices_not_ok": 2`, `"points_not_good": 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/status.json lacks %s", want)
		}
	}
	testtool.ValidStatus(t, []byte(text))
	// The schema catches a key left out and a number where the rule says
	// null.
	for _, broken := range []string{
		strings.Replace(text, `"why": null,`, ``, 1),
		strings.Replace(text, `"value": null,`, `"value": "0.0",`, 1),
		strings.Replace(text, `"oldest_age_s": 60`, `"oldest_age_s": "60"`, 1),
	} {
		if broken == text {
			t.Fatal("a broken document is the document")
		}
		if err := testtool.CheckStatus([]byte(broken)); err == nil {
			t.Errorf("the status schema takes a broken document")
		}
	}

	// A key with nothing to say is null, never left out: a client tells
	// "none" from a key it does not know.
	nulls := map[string][]string{
		"devices": {"why", "last_error"},
		"points":  {"unit", "last_value", "raw"},
		"buses":   {"cause", "last_round_trip_device"},
	}
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(k, e)
			}
		case []any:
			for _, e := range v {
				if obj, ok := e.(map[string]any); ok {
					for _, k := range nulls[key] {
						if _, ok := obj[k]; !ok {
							t.Errorf("/status.json: %s %v has no %q (want null)", key, obj["name"], k)
						}
					}
				}
				walk(key, e)
			}
		}
	}
	walk("", m)
	for _, k := range []string{"last_error", "last_error_at"} {
		if _, ok := m["buffer"].(map[string]any)[k]; !ok {
			t.Errorf("/status.json: buffer has no %q (want null)", k)
		}
	}
	for _, k := range []string{"problem"} {
		if _, ok := m["clock"].(map[string]any)[k]; !ok {
			t.Errorf("/status.json: clock has no %q (want null)", k)
		}
	}

	// Never read: no age, no time, no value of any kind.
	i := strings.Index(text, `"name": "WindSpeed"`)
	if i < 0 || !strings.Contains(text[i:], `"value": null,
     "quality": "bad",
     "age_s": null,
     "at": null,
     "last_value": null,
     "raw": null
`) {
		t.Errorf("a point never read: %s", text[max(i, 0):])
	}
}

// A bus's utilisation and an upstream's share are taken over the window
// once it exists, and since the start before it.
func TestRatesOverTheWindow(t *testing.T) {
	f := newFake()
	now := t0
	s := server(f, &now)
	f.busy["a"] = 36 * time.Minute // over the hour since the start: 60 %
	f.delivered["mqtt://one:1883"], f.delivered["mqtt://two:1883"] = 300, 100
	snap := s.Snapshot()
	if u := snap.Buses[0].Utilisation; u == nil || *u != 0.6 || snap.Buses[0].UtilisationWindowSeconds != 3600 {
		t.Errorf("utilisation before a window: %v over %v s, want 0.6 since the start", deref(u), snap.Buses[0].UtilisationWindowSeconds)
	}
	if sh := snap.Uplink.Upstreams[0].Share; sh == nil || *sh != 0.75 || snap.Uplink.ShareWindowSeconds != 0 {
		t.Errorf("share before a window: %v (window %v), want 0.75 since the start", deref(sh), snap.Uplink.ShareWindowSeconds)
	}

	now = now.Add(10 * time.Second)
	f.busy["a"] += 2 * time.Second
	f.delivered["mqtt://two:1883"] += 50
	snap = s.Snapshot()
	if u := snap.Buses[0].Utilisation; u == nil || *u != 0.2 || snap.Buses[0].UtilisationWindowSeconds != 10 {
		t.Errorf("utilisation over 10 s busy 2 s: %v over %v s", deref(u), snap.Buses[0].UtilisationWindowSeconds)
	}
	up := snap.Uplink.Upstreams
	if up[0].Share == nil || *up[0].Share != 0 || up[1].Share == nil || *up[1].Share != 1 || snap.Uplink.ShareWindowSeconds != 10 {
		t.Errorf("shares over 10 s when only two delivered: %v, %v", deref(up[0].Share), deref(up[1].Share))
	}

	// A reload restarts the counters: back to since the start, never
	// a negative rate.
	now = now.Add(10 * time.Second)
	f.busy["a"] = time.Second
	f.delivered["mqtt://one:1883"], f.delivered["mqtt://two:1883"] = 1, 0
	snap = s.Snapshot()
	if u := snap.Buses[0].Utilisation; u == nil || *u < 0 || snap.Buses[0].UtilisationWindowSeconds < 3600 {
		t.Errorf("utilisation after the counter restarted: %v over %v s", deref(u), snap.Buses[0].UtilisationWindowSeconds)
	}
	if sh := snap.Uplink.Upstreams[0].Share; sh == nil || *sh != 1 {
		t.Errorf("share after the counters restarted: %v", deref(sh))
	}

	// Past the span, the oldest samples are dropped.
	for range 20 {
		now = now.Add(windowStep)
		f.busy["a"] += windowStep / 2
		snap = s.Snapshot()
	}
	if w := snap.Buses[0].UtilisationWindowSeconds; w > windowSpan.Seconds() || w < windowSpan.Seconds()-windowStep.Seconds() {
		t.Errorf("window %v s, want about %v", w, windowSpan)
	}
	if u := snap.Buses[0].Utilisation; u == nil || *u != 0.5 {
		t.Errorf("utilisation, busy half the time: %v", deref(u))
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// Every text from the sources is escaped: a device, point, upstream or
// error that carries markup shows as text.
func TestPageEscapes(t *testing.T) {
	f := newFake()
	evil := `<script>alert(1)</script>"'&`
	f.devs[0].Name, f.points[0].Device, f.points[0].Name, f.points[0].Unit = evil, evil, evil, evil
	f.devs[1].LastError = evil
	f.ups[0].Name = evil
	f.site.SiteID, f.site.ConfigFile = evil, evil
	f.downlink = &metrics.DownlinkStatus{Enabled: true, Commands: []metrics.DownlinkCommand{{At: t0, Device: evil, Command: evil, Result: evil}}}
	now := t0
	s := server(f, &now)
	for _, path := range []string{"/", "/?fragment=1"} {
		page := body(t, get(t, metrics.NewHandler(f.sources(), metrics.HandlerOptions{Pages: s.Pages()}), path))
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
	h := metrics.NewHandler(f.sources(), metrics.HandlerOptions{Pages: server(f, &now).Pages()})
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
	f.site.LastReload = &metrics.ReloadResult{At: t0.Add(-time.Minute), Err: "a restart is needed to apply it; changed: buffer"}
	now := t0
	s := New(f.sources(), Options{Now: func() time.Time { return now }, Clock: func(now time.Time) Clock {
		return Clock{Now: now, Synchronised: ptr(false), Problem: ptr("not synchronised")}
	}})
	page := body(t, get(t, metrics.NewHandler(f.sources(), metrics.HandlerOptions{Pages: s.Pages()}), "/"))
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
	f.site.LastReload = &metrics.ReloadResult{At: t0.Add(-time.Minute), Err: "a restart is needed to apply it; changed: buffer"}
	snap := s.Snapshot()
	if !snap.Site.Config.Changed || snap.Site.LastReload == nil || snap.Site.LastReload.Applied {
		t.Errorf("site %+v", snap.Site)
	}

	well := newFake()
	well.devs, well.points = well.devs[:1], well.points[:1]
	well.ups = well.ups[:1]
	s = server(well, &now)
	page = body(t, get(t, metrics.NewHandler(well.sources(), metrics.HandlerOptions{Pages: s.Pages()}), "/?errors=1"))
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
	f.durable = &metrics.Durability{Reason: "read_only", Words: "buffer not durable: the card is read-only", Since: t0.Add(-time.Minute), Volatile: 12}
	s := server(f, &now)
	doc := body(t, get(t, metrics.NewHandler(f.sources(), metrics.HandlerOptions{Pages: s.Pages()}), "/status.json"))
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
	f.downlink = &metrics.DownlinkStatus{Enabled: true, Commands: []metrics.DownlinkCommand{
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

// fifty is a site of 50 devices of 5 points each on 5 buses, some failing.
func fifty() *fake {
	f := newFake()
	f.devs, f.points = nil, nil
	for i := range 50 {
		name := fmt.Sprintf("gas-%02d", i)
		bus := []string{"a", "b"}[i%2]
		d := sensors.DeviceStatus{Name: name, Bus: bus, Health: sensors.OK, Polls: 1000, LastOK: t0, LastDuration: 30 * time.Millisecond}
		q := sensors.Good
		if i%10 == 3 {
			d.Health, d.ConsecutiveFailures, d.LastError, q = sensors.Offline, 5, fmt.Sprintf("device %s (slave %d on bus %s): read holding 0+10: modbus: no reply before the deadline (timeout)", name, i+1, bus), sensors.Bad
		}
		f.devs = append(f.devs, d)
		for j, p := range []string{"CH4", "CO", "O2", "H2S", "Temperature"} {
			f.points = append(f.points, sensors.Point{Device: name, Name: p, Unit: "ppm", Value: packet.Float(float64(i*j)/10, 1), At: t0, Raw: []byte{0, byte(i * j)}, Quality: q})
		}
	}
	return f
}

// The page of a large site stays under 100 KB: a phone on a weak link.
func TestPageSizeAt50Devices(t *testing.T) {
	f := fifty()
	now := t0
	h := metrics.NewHandler(f.sources(), metrics.HandlerOptions{Pages: server(f, &now).Pages()})
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

func BenchmarkStatusJSON50Devices(b *testing.B) {
	f := fifty()
	s := New(f.sources(), Options{Clock: func(now time.Time) Clock { return Clock{Now: now} }})
	h := metrics.NewHandler(f.sources(), metrics.HandlerOptions{Pages: s.Pages()})
	r := httptest.NewRequest(http.MethodGet, "/status.json", nil)
	r.RemoteAddr = "127.0.0.1:1"
	var n int
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		n = w.Body.Len()
	}
	b.ReportMetric(float64(n), "bytes/op")
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
