package status

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/metrics"
)

func TestSnapshotJSON(t *testing.T) {
	f := newFake()
	now := t0
	h := metrics.NewHandler(nil, metrics.HandlerOptions{Pages: server(f, &now).Pages()})
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
     "raw": null,
     "alarm": false,
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

func BenchmarkStatusJSON50Devices(b *testing.B) {
	f := fifty()
	s := New(f.sources(), Options{Clock: func(now time.Time) Clock { return Clock{Now: now} }})
	h := metrics.NewHandler(nil, metrics.HandlerOptions{Pages: s.Pages()})
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
