package uplink

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/selector"
	"fieldlink/uplink/internal/httpc"
)

const registryTestList = `{"upstreams":[{"url":"mqtts://ingest-1:8883","weight":2},{"url":"https://ingest-2/api/packets"}]}`

var registryTestWant = []RegistryUpstream{
	{URL: "mqtts://ingest-1:8883", Weight: 2},
	{URL: "https://ingest-2/api/packets", Weight: 1},
}

func TestRegistryParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []RegistryUpstream
	}{
		{"example", registryTestList, registryTestWant},
		{"unknown keys", `{"version":7,"upstreams":[{"url":"mqtt://a","weight":0,"zone":"north"}],"ttl":30}`,
			[]RegistryUpstream{{URL: "mqtt://a", Weight: 0}}},
		{"null weight", `{"upstreams":[{"url":"http://a:8080/in","weight":null}]}`,
			[]RegistryUpstream{{URL: "http://a:8080/in", Weight: 1}}},
		{"fractional weight", `{"upstreams":[{"url":"mqtt://[::1]:1884","weight":0.25}]}`,
			[]RegistryUpstream{{URL: "mqtt://[::1]:1884", Weight: 0.25}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRegistry([]byte(tc.in))
			if err != nil {
				t.Fatalf("parseRegistry: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseRegistry = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRegistryParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", ``, "not a JSON object"},
		{"not JSON", `<html>502 Bad Gateway</html>`, "not a JSON object"},
		{"truncated", registryTestList[:30], "bad JSON"},
		{"array", `[{"url":"mqtt://a"}]`, "not a JSON object"},
		{"no upstreams", `{"servers":[]}`, `no "upstreams"`},
		{"null upstreams", `{"upstreams":null}`, `no "upstreams"`},
		{"upstreams object", `{"upstreams":{"url":"mqtt://a"}}`, "not an array"},
		{"empty list", `{"upstreams":[]}`, "is empty"},
		{"entry not object", `{"upstreams":["mqtt://a"]}`, "upstreams[0]: not an object"},
		{"no url", `{"upstreams":[{"weight":1}]}`, `upstreams[0]: no "url"`},
		{"url number", `{"upstreams":[{"url":7}]}`, `"url" is not a string`},
		{"empty url", `{"upstreams":[{"url":""}]}`, `empty "url"`},
		{"bad scheme", `{"upstreams":[{"url":"mqtt://a"},{"url":"ftp://b/x"}]}`, `upstreams[1]: url: ftp://b/x: scheme "ftp"`},
		{"tcp scheme", `{"upstreams":[{"url":"tcp://b:1883"}]}`, `scheme "tcp"`},
		{"no scheme", `{"upstreams":[{"url":"ingest-1:8883"}]}`, `upstreams[0]: url`},
		{"no host", `{"upstreams":[{"url":"https:///api"}]}`, "no host"},
		{"bad port", `{"upstreams":[{"url":"mqtt://a:99999"}]}`, "bad port"},
		{"negative weight", `{"upstreams":[{"url":"mqtt://a","weight":-1}]}`, "weight -1"},
		{"weight string", `{"upstreams":[{"url":"mqtt://a","weight":"2"}]}`, `"weight" is not a number`},
		{"weight huge", `{"upstreams":[{"url":"mqtt://a","weight":1e999}]}`, `"weight"`},
		{"duplicate", `{"upstreams":[{"url":"mqtt://a"},{"url":"mqtt://b"},{"url":"mqtt://a"}]}`, "upstreams[2] repeats upstreams[0]"},
		{"credentials hidden", `{"upstreams":[{"url":"ftp://user:hunter2@a/x?token=t0k"}]}`, "ftp://a/x?..."},
		{"too many", `{"upstreams":[` + strings.Repeat(`{"url":"mqtt://a"},`, selector.MaxUpstreams) + `{"url":"mqtt://a"}]}`, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := parseRegistry([]byte(tc.in))
			if err == nil {
				t.Fatalf("parseRegistry(%.60s) = %+v, want an error", tc.in, list)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "uplink: registry: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want one saying %q", msg, tc.want)
			}
			if strings.Contains(msg, "hunter2") || strings.Contains(msg, "t0k") {
				t.Errorf("error %q shows a secret", msg)
			}
		})
	}
}

func FuzzParseRegistry(f *testing.F) {
	f.Add([]byte(registryTestList))
	f.Add([]byte(`{"upstreams":[{"url":"mqtt://a","weight":0,"zone":"n"}]}`))
	f.Add([]byte(`{"upstreams":[{"url":"mqtt://[::1]:1884","weight":0.25},{"url":"HTTP://b"}]}`))
	f.Add([]byte(`{"upstreams":[{"url":"ftp://b"}]}`))
	f.Add([]byte(`{"upstreams":[]}`))
	f.Add([]byte(`{"upstreams":[{"url":"mqtt://a"},{"url":"mqtt://a"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := parseRegistry(data)
		if err != nil {
			if list != nil {
				t.Fatalf("error %v with a list", err)
			}
			return
		}
		if !json.Valid(data) || len(list) == 0 || len(list) > selector.MaxUpstreams {
			t.Fatalf("accepted %q as %d upstreams", data, len(list))
		}
		// The standard library reads the same list.
		var std struct {
			Upstreams []map[string]any `json:"upstreams"`
		}
		if err := json.Unmarshal(data, &std); err != nil || len(std.Upstreams) != len(list) {
			t.Fatalf("encoding/json: %v, %d entries; parseRegistry: %d", err, len(std.Upstreams), len(list))
		}
		seen := map[string]bool{}
		for i, up := range list {
			if u, _ := std.Upstreams[i]["url"].(string); u != up.URL {
				t.Fatalf("upstreams[%d].url: %q vs encoding/json %q", i, up.URL, u)
			}
			if _, err := ProbeTarget(up.URL); err != nil {
				t.Fatalf("accepted url %q: %v", up.URL, err)
			}
			if seen[up.URL] {
				t.Fatalf("duplicate %q accepted", up.URL)
			}
			seen[up.URL] = true
			if math.IsNaN(up.Weight) || math.IsInf(up.Weight, 0) || up.Weight < 0 {
				t.Fatalf("weight %v", up.Weight)
			}
		}
		// A list round-trips through its JSON encoding (what Seed persists).
		enc, err := json.Marshal(map[string]any{"upstreams": list})
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseRegistry(enc)
		if err != nil || !reflect.DeepEqual(again, list) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, list)
		}
	})
}

// registryTestServer serves whatever body and status it holds, with an ETag
// when etag is set; it counts If-None-Match hits.
type registryTestServer struct {
	*httpTestServer
	mu       sync.Mutex
	status   int
	body     string
	etag     string
	notMod   atomic.Int32
	requests atomic.Int32
}

func registryTestNewServer(t *testing.T, body string) *registryTestServer {
	s := &registryTestServer{status: 200, body: body}
	s.httpTestServer = httpTestNewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.mu.Lock()
		status, body, etag := s.status, s.body, s.etag
		s.mu.Unlock()
		if etag != "" {
			if r.Header.Get("If-None-Match") == etag {
				s.notMod.Add(1)
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("ETag", etag)
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	})
	return s
}

func (s *registryTestServer) set(status int, body, etag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body, s.etag = status, body, etag
}

func registryTestNew(t *testing.T, url string, onChange func([]RegistryUpstream)) *Registry {
	t.Helper()
	r, err := NewRegistry(RegistryConfig{URL: url, Timeout: time.Second, OnChange: onChange})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistryRefresh(t *testing.T) {
	srv := registryTestNewServer(t, registryTestList)
	var changes [][]RegistryUpstream
	r := registryTestNew(t, srv.URL+"/upstreams", func(l []RegistryUpstream) { changes = append(changes, l) })

	if list, at := r.upstreams(); list != nil || !at.IsZero() || r.Raw() != nil {
		t.Fatalf("a new Registry has %v, %v, %q", list, at, r.Raw())
	}
	before := time.Now()
	if err := r.refresh(context.Background()); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	list, at := r.upstreams()
	if !reflect.DeepEqual(list, registryTestWant) || at.Before(before) || at.After(time.Now()) {
		t.Errorf("Upstreams = %+v, %v", list, at)
	}
	if string(r.Raw()) != registryTestList {
		t.Errorf("Raw = %s", r.Raw())
	}
	if len(changes) != 1 || !reflect.DeepEqual(changes[0], registryTestWant) {
		t.Errorf("OnChange calls %+v", changes)
	}

	// Same list in another order: no change.
	reordered := `{"upstreams":[{"url":"https://ingest-2/api/packets","weight":1},{"url":"mqtts://ingest-1:8883","weight":2}]}`
	srv.set(200, reordered, "")
	if err := r.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 {
		t.Errorf("a reordered list called OnChange")
	}

	// A new weight and a new upstream: picked up.
	changed := `{"upstreams":[{"url":"mqtts://ingest-1:8883","weight":5},{"url":"https://ingest-3/api/packets"}]}`
	srv.set(200, changed, "")
	if err := r.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []RegistryUpstream{{URL: "mqtts://ingest-1:8883", Weight: 5}, {URL: "https://ingest-3/api/packets", Weight: 1}}
	if list, _ := r.upstreams(); !reflect.DeepEqual(list, want) {
		t.Errorf("after the change: %+v", list)
	}
	if len(changes) != 2 || !reflect.DeepEqual(changes[1], want) || string(r.Raw()) != changed {
		t.Errorf("OnChange calls %+v, Raw %s", changes, r.Raw())
	}

	// The returned slices are copies.
	list, _ = r.upstreams()
	list[0].URL = "mqtt://mutated"
	if again, _ := r.upstreams(); again[0].URL == "mqtt://mutated" {
		t.Error("Upstreams returned the registry's own slice")
	}
}

func TestRegistryKeepsLastGood(t *testing.T) {
	srv := registryTestNewServer(t, registryTestList)
	var changes atomic.Int32
	r := registryTestNew(t, srv.URL, func([]RegistryUpstream) { changes.Add(1) })
	if err := r.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, good := r.upstreams()

	for _, tc := range []struct {
		name, body, want string
		status           int
	}{
		{"invalid JSON", `{"upstreams":[{"url":`, "bad JSON", 200},
		{"bad scheme", `{"upstreams":[{"url":"ftp://ingest-9"}]}`, `scheme "ftp"`, 200},
		{"empty list", `{"upstreams":[]}`, "empty", 200},
		{"error status", registryTestList, "500", 500},
		{"not found", `not here`, "404", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.set(tc.status, tc.body, "")
			err := r.refresh(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Refresh: %v, want an error saying %q", err, tc.want)
			}
			list, at := r.upstreams()
			if !reflect.DeepEqual(list, registryTestWant) || !at.Equal(good) || string(r.Raw()) != registryTestList {
				t.Errorf("after a bad answer: %+v, %v, %s", list, at, r.Raw())
			}
		})
	}

	srv.Close() // registry down
	err := r.refresh(context.Background())
	if err == nil || !httpc.Retryable(err) {
		t.Errorf("Refresh of a closed registry: %v", err)
	}
	if list, at := r.upstreams(); !reflect.DeepEqual(list, registryTestWant) || !at.Equal(good) {
		t.Errorf("registry down: %+v, %v", list, at)
	}
	if n := changes.Load(); n != 1 {
		t.Errorf("OnChange called %d times, want once", n)
	}
}

func TestRegistrySeed(t *testing.T) {
	srv := registryTestNewServer(t, registryTestList)
	var changes atomic.Int32
	r := registryTestNew(t, srv.URL, func([]RegistryUpstream) { changes.Add(1) })

	persisted := []RegistryUpstream{{URL: "mqtt://old-broker:1883", Weight: 3}}
	if err := r.Seed(persisted); err != nil {
		t.Fatalf("Seed: %v", err)
	}
	list, at := r.upstreams()
	if !reflect.DeepEqual(list, persisted) || !at.IsZero() {
		t.Errorf("after Seed: %+v, %v", list, at)
	}
	// Raw of a seeded list parses back to it.
	if again, err := parseRegistry(r.Raw()); err != nil || !reflect.DeepEqual(again, persisted) {
		t.Errorf("Raw after Seed = %s: %+v, %v", r.Raw(), again, err)
	}
	if changes.Load() != 0 {
		t.Error("Seed called OnChange")
	}
	// Registry down: the seeded list stays.
	srv.set(503, "", "")
	if err := r.refresh(context.Background()); err == nil {
		t.Fatal("Refresh of a 503 succeeded")
	}
	if list, _ := r.upstreams(); !reflect.DeepEqual(list, persisted) {
		t.Errorf("seeded list lost: %+v", list)
	}
	// The first fetch replaces it, and a later Seed changes nothing.
	srv.set(200, registryTestList, "")
	if err := r.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Seed(persisted); err != nil {
		t.Fatal(err)
	}
	if list, _ := r.upstreams(); !reflect.DeepEqual(list, registryTestWant) || changes.Load() != 1 {
		t.Errorf("after fetch and a late Seed: %+v, %d changes", list, changes.Load())
	}

	for _, bad := range [][]RegistryUpstream{
		nil,
		{{URL: "ftp://x"}},
		{{URL: "mqtt://a", Weight: -1}},
		{{URL: "mqtt://a", Weight: math.NaN()}},
		{{URL: "mqtt://a"}, {URL: "mqtt://a"}},
	} {
		r2 := registryTestNew(t, srv.URL, nil)
		if err := r2.Seed(bad); err == nil {
			t.Errorf("Seed(%+v) accepted", bad)
		}
		if list, _ := r2.upstreams(); list != nil {
			t.Errorf("a refused Seed left %+v", list)
		}
	}
}

func TestRegistryETag(t *testing.T) {
	srv := registryTestNewServer(t, registryTestList)
	srv.set(200, registryTestList, `"v1"`)
	var changes atomic.Int32
	r := registryTestNew(t, srv.URL, func([]RegistryUpstream) { changes.Add(1) })
	if err := r.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, first := r.upstreams()
	time.Sleep(5 * time.Millisecond) // let the clock move for the fetch time
	if err := r.refresh(context.Background()); err != nil {
		t.Fatalf("Refresh answered 304: %v", err)
	}
	list, second := r.upstreams()
	if srv.notMod.Load() != 1 || !second.After(first) || !reflect.DeepEqual(list, registryTestWant) || changes.Load() != 1 {
		t.Errorf("304: %d not-modified, times %v → %v, list %+v, %d changes", srv.notMod.Load(), first, second, list, changes.Load())
	}
	if string(r.Raw()) != registryTestList {
		t.Errorf("Raw after 304: %s", r.Raw())
	}
}

func TestRegistryRun(t *testing.T) {
	srv := registryTestNewServer(t, registryTestList)
	changes := make(chan []RegistryUpstream, 10)
	var logs testtool.SyncBuffer
	r, err := NewRegistry(RegistryConfig{
		URL:      srv.URL,
		Interval: 30 * time.Millisecond,
		OnChange: func(l []RegistryUpstream) { changes <- l },
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	select {
	case l := <-changes:
		if !reflect.DeepEqual(l, registryTestWant) {
			t.Errorf("first list %+v", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no first list")
	}
	srv.set(200, `{"upstreams":[{"url":"mqtt://new:1883"}]}`, "")
	select {
	case l := <-changes:
		if len(l) != 1 || l[0].URL != "mqtt://new:1883" {
			t.Errorf("changed list %+v", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the change was not picked up")
	}
	srv.set(200, `garbage`, "")
	testtool.WaitFor(t, 5*time.Second, "a failed refresh logged", func() bool { return strings.Contains(logs.String(), "registry refresh failed") })
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if list, _ := r.upstreams(); len(list) != 1 || list[0].URL != "mqtt://new:1883" {
		t.Errorf("after garbage: %+v", list)
	}
}

func TestRegistryConfig(t *testing.T) {
	for _, cfg := range []RegistryConfig{
		{},
		{URL: "mqtt://registry"},
		{URL: "http://registry", Interval: -time.Second},
	} {
		if _, err := NewRegistry(cfg); err == nil {
			t.Errorf("NewRegistry(%+v) accepted", cfg)
		}
	}
	srv := registryTestNewServer(t, registryTestList)
	r, err := NewRegistry(RegistryConfig{URL: strings.Replace(srv.URL, "http://", "http://reg:s3cr3t@", 1) + "/list?key=k"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Name(), "s3cr3t") || strings.Contains(r.Name(), "key=k") {
		t.Errorf("Name() = %q", r.Name())
	}
	if err := r.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := http.Request{Header: srv.Seen()[0].Header}
	if user, pw, ok := req.BasicAuth(); !ok || user != "reg" || pw != "s3cr3t" {
		t.Errorf("basic auth %q %q %v", user, pw, ok)
	}
}

// A registry that answers more upstreams than a gateway takes is refused
// whole: the last good list stays.
func TestRegistryRefusesMoreThanMaxUpstreams(t *testing.T) {
	srv := registryTestNewServer(t, registryTestList)
	r := registryTestNew(t, srv.URL, nil)
	if err := r.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`{"upstreams":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"url":"mqtt://ingest-%d:1883"}`, i)
	}
	b.WriteString(`]}`)
	srv.set(200, b.String(), "")
	err := r.refresh(context.Background())
	if err == nil || !strings.Contains(err.Error(), "registry answered 100 upstreams, more than the 64 a gateway takes") ||
		!strings.Contains(err.Error(), "keeping the last good list") {
		t.Fatalf("Refresh of 100 upstreams: %v, want it refused", err)
	}
	if list, _ := r.upstreams(); !reflect.DeepEqual(list, registryTestWant) {
		t.Fatalf("after a refused answer: %+v, want the last good list", list)
	}
}
