package uplink

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/selector"
	"fieldlink/uplink/internal/httpc"
)

const loadTestGood = `{"cpu":0.42,"memory":0.61,"disk_io":0.10,"network":0.25,"processes":183,"connections":57,` +
	`"cpu_mhz":2400,"memory_mb":8192,"bandwidth_mbps":1000,"ts":"2026-11-29T08:00:00Z"}`

var loadTestNow = time.Date(2026, 11, 29, 8, 0, 30, 0, time.UTC)

// loadTestWith returns the good report with key set to the raw JSON value
// (or removed when raw is "").
func loadTestWith(key, raw string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(loadTestGood), &m); err != nil {
		panic(err)
	}
	if raw == "" {
		delete(m, key)
	} else {
		m[key] = json.RawMessage(raw)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestLoadParse(t *testing.T) {
	want := selector.Load{
		CPU: 0.42, Memory: 0.61, DiskIO: 0.10, Network: 0.25,
		Processes: 183, Connections: 57,
		CPUMHz: 2400, MemoryMB: 8192, BandwidthMbps: 1000,
		At: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC),
	}
	withAt := func(at time.Time) selector.Load { l := want; l.At = at; return l }
	for _, tc := range []struct {
		name string
		in   string
		want selector.Load
	}{
		{"good", loadTestGood, want},
		{"spaces", "\n  " + loadTestGood + "  \n", want},
		{"no ts", loadTestWith("ts", ""), withAt(loadTestNow)},
		{"null ts", loadTestWith("ts", "null"), withAt(loadTestNow)},
		{"future ts", loadTestWith("ts", `"2026-11-29T09:00:00Z"`), withAt(loadTestNow)},
		{"ts with zone and fraction", loadTestWith("ts", `"2026-11-29T16:00:00.5+08:00"`),
			withAt(time.Date(2026, 11, 29, 8, 0, 0, 5e8, time.UTC))},
		{"old ts", loadTestWith("ts", `"2026-11-28T08:00:00Z"`), withAt(time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC))},
		{"unknown keys ignored", loadTestWith("gpu", `{"util":0.9}`), want},
		{"bounds", loadTestWith("cpu", "0"), func() selector.Load { l := want; l.CPU = 0; return l }()},
		{"one", loadTestWith("network", "1.0"), func() selector.Load { l := want; l.Network = 1; return l }()},
		{"exponent fraction", loadTestWith("memory", "6.1e-1"), want},
		{"zero counts", loadTestWith("connections", "0"), func() selector.Load { l := want; l.Connections = 0; return l }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLoad([]byte(tc.in), loadTestNow)
			if err != nil {
				t.Fatalf("parseLoad(%s): %v", tc.in, err)
			}
			if !got.At.Equal(tc.want.At) {
				t.Errorf("At = %v, want %v", got.At, tc.want.At)
			}
			got.At, tc.want.At = time.Time{}, time.Time{}
			if got != tc.want {
				t.Errorf("parseLoad = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLoadParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{"empty", "", []string{"not a JSON object"}},
		{"null", "null", []string{"not a JSON object"}},
		{"array", "[" + loadTestGood + "]", []string{"not a JSON object"}},
		{"string", `"cpu"`, []string{"not a JSON object"}},
		{"truncated", loadTestGood[:40], []string{"bad JSON"}},
		{"trailing data", loadTestGood + ` {}`, []string{"bad JSON"}},
		{"missing cpu", loadTestWith("cpu", ""), []string{"missing cpu"}},
		{"null cpu", loadTestWith("cpu", "null"), []string{"missing cpu"}},
		{"missing several", `{"cpu":0.5,"memory":0.5}`, []string{"missing disk_io, network, processes, connections, cpu_mhz, memory_mb, bandwidth_mbps"}},
		{"empty object", `{}`, []string{"missing cpu, memory"}},
		{"upper case key", strings.Replace(loadTestGood, `"cpu"`, `"CPU"`, 1), []string{"missing cpu"}},
		{"cpu above 1", loadTestWith("cpu", "1.5"), []string{"cpu 1.5: want a fraction 0..1"}},
		{"cpu percentage", loadTestWith("cpu", "42"), []string{"cpu 42", "42% is 0.42"}},
		{"cpu negative", loadTestWith("cpu", "-0.1"), []string{"cpu -0.1"}},
		{"disk_io 101", loadTestWith("disk_io", "101"), []string{"disk_io 101: want a fraction 0..1"}},
		{"huge number", loadTestWith("network", "1e999"), []string{"network", "out of range"}},
		{"processes fraction", loadTestWith("processes", "1.5"), []string{"processes 1.5: want a whole number"}},
		{"processes exponent", loadTestWith("processes", "1e2"), []string{"processes 1e2"}},
		{"processes negative", loadTestWith("processes", "-1"), []string{"processes -1"}},
		{"connections too many", loadTestWith("connections", "3000000000"), []string{"connections 3000000000"}},
		{"cpu_mhz zero", loadTestWith("cpu_mhz", "0"), []string{"cpu_mhz 0: want a number > 0"}},
		{"memory_mb negative", loadTestWith("memory_mb", "-8192"), []string{"memory_mb -8192"}},
		{"cpu string", loadTestWith("cpu", `"0.42"`), []string{"cpu: want a number, got a string"}},
		{"processes string", loadTestWith("processes", `"183"`), []string{"processes: want a number, got a string"}},
		{"cpu bool", loadTestWith("cpu", `true`), []string{"got a boolean"}},
		{"cpu object", loadTestWith("cpu", `{"v":1}`), []string{"got an object"}},
		{"bandwidth array", loadTestWith("bandwidth_mbps", `[1000]`), []string{"got an array"}},
		{"ts number", loadTestWith("ts", `1764403200`), []string{"ts: want an RFC 3339 string"}},
		{"ts not RFC 3339", loadTestWith("ts", `"2026-11-29 08:00:00"`), []string{`ts "2026-11-29 08:00:00"`}},
		{"every problem listed", `{"cpu":2,"memory":"x","disk_io":0,"network":0,"processes":1,"connections":1,"cpu_mhz":1,"memory_mb":1}`,
			[]string{"missing bandwidth_mbps", "cpu 2", "memory: want a number"}},
		{"too large", `{"pad":"` + strings.Repeat("x", loadMaxBytes) + `"}`, []string{"more than"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := parseLoad([]byte(tc.in), loadTestNow)
			if err == nil {
				t.Fatalf("parseLoad(%.80s) = %+v, want an error", tc.in, l)
			}
			if l != (selector.Load{}) {
				t.Errorf("a refused report returned %+v", l)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "uplink: load report: ") {
				t.Errorf("error %q lacks the prefix", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

func FuzzParseLoad(f *testing.F) {
	f.Add([]byte(loadTestGood))
	f.Add([]byte(loadTestWith("ts", "")))
	f.Add([]byte(loadTestWith("cpu", "42")))
	f.Add([]byte(loadTestWith("processes", "1.5")))
	f.Add([]byte(loadTestWith("ts", `"2026-11-29T16:00:00.5+08:00"`)))
	f.Add([]byte(`{"cpu":1,"memory":0,"disk_io":1e-300,"network":0.5,"processes":2147483647,"connections":0,"cpu_mhz":1e300,"memory_mb":0.5,"bandwidth_mbps":1,"cpu":0.5}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := parseLoad(data, loadTestNow)
		if err != nil {
			if l != (selector.Load{}) {
				t.Fatalf("error %v with a non-zero Load %+v", err, l)
			}
			return
		}
		// The standard library must agree: valid JSON, and the same values
		// under the same (exact) keys.
		if !json.Valid(data) {
			t.Fatalf("parseLoad accepted invalid JSON %q", data)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("encoding/json refuses what parseLoad accepted: %v", err)
		}
		for key, got := range map[string]float64{
			"cpu": l.CPU, "memory": l.Memory, "disk_io": l.DiskIO, "network": l.Network,
			"processes": float64(l.Processes), "connections": float64(l.Connections),
			"cpu_mhz": l.CPUMHz, "memory_mb": l.MemoryMB, "bandwidth_mbps": l.BandwidthMbps,
		} {
			if v, ok := m[key].(float64); !ok || v != got {
				t.Fatalf("%s: parseLoad %v, encoding/json %v", key, got, m[key])
			}
		}
		for _, v := range []float64{l.CPU, l.Memory, l.DiskIO, l.Network} {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("utilisation %v out of 0..1", v)
			}
		}
		for _, v := range []float64{l.CPUMHz, l.MemoryMB, l.BandwidthMbps} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Fatalf("capacity %v", v)
			}
		}
		if l.Processes < 0 || l.Connections < 0 || l.Processes > math.MaxInt32 || l.Connections > math.MaxInt32 {
			t.Fatalf("counts %d %d", l.Processes, l.Connections)
		}
		if l.At.After(loadTestNow) || l.At.IsZero() {
			t.Fatalf("At %v, now %v", l.At, loadTestNow)
		}
	})
}

func TestLoadPoller(t *testing.T) {
	var body atomic.Value
	body.Store(loadTestGood)
	var status atomic.Int32
	status.Store(200)
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Load()))
		w.Write([]byte(body.Load().(string)))
	})
	u := strings.Replace(srv.URL, "http://", "http://probe:pw@", 1) + "/load?site=7"
	p, err := newLoadPoller(u, time.Second, time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != srv.URL+"/load?..." {
		t.Errorf("Name() = %q", p.Name())
	}
	l, err := p.Poll(context.Background())
	if err != nil {
		t.Fatalf("Poll: %v", err)
	}
	if l.CPU != 0.42 || l.Connections != 57 || l.BandwidthMbps != 1000 {
		t.Errorf("Poll = %+v", l)
	}
	r := srv.Seen()[0]
	req := http.Request{Header: r.Header}
	if user, pw, ok := req.BasicAuth(); !ok || user != "probe" || pw != "pw" || r.Method != http.MethodGet || r.Path != "/load" {
		t.Errorf("request %s %s, basic auth %q %q %v", r.Method, r.Path, user, pw, ok)
	}

	body.Store(`{"cpu":"high"}`)
	if _, err := p.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "cpu") {
		t.Errorf("Poll of a bad report: %v", err)
	}
	status.Store(503)
	body.Store(loadTestGood)
	if _, err := p.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "503") || !httpc.Retryable(err) {
		t.Errorf("Poll of a 503: %v", err)
	}
	status.Store(200)
	body.Store(`{"pad":"` + strings.Repeat("x", loadMaxBytes) + `"}`)
	if _, err := p.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("Poll of an oversized report: %v", err)
	}
	if n := srv.Conns.Load(); n != 1 {
		t.Errorf("%d polls used %d connections, want 1", len(srv.Seen()), n)
	}

	if _, err := newLoadPoller("mqtt://broker/load", 0, 0, nil, nil); err == nil {
		t.Error("newLoadPoller accepted an mqtt URL")
	}
}

type loadTestReport struct {
	l   selector.Load
	err error
}

func TestLoadPollerRun(t *testing.T) {
	var n atomic.Int32
	srv := httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Write([]byte(loadTestWith("ts", "")))
	})
	reports := make(chan loadTestReport, 100)
	p, err := newLoadPoller(srv.URL, 30*time.Millisecond, time.Second, nil, func(l selector.Load, err error) {
		reports <- loadTestReport{l, err}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	before := time.Now()
	go func() { p.Run(ctx); close(done) }()
	for i := range 3 {
		var r loadTestReport
		select {
		case r = <-reports:
		case <-time.After(5 * time.Second):
			t.Fatalf("no report %d", i)
		}
		if i == 1 {
			if r.err == nil || !strings.Contains(r.err.Error(), "500") {
				t.Errorf("report %d: %v, want the 500", i, r.err)
			}
			continue
		}
		if r.err != nil || r.l.CPU != 0.42 || r.l.At.Before(before) || r.l.At.After(time.Now()) {
			t.Errorf("report %d: %+v, %v", i, r.l, r.err)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
