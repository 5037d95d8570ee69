package updategate

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/buffer/cardstore"
	"fieldlink/internal/testtool"
	"fieldlink/metrics"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/uplink"
)

// site is what the fake daemon's sources report.
type site struct {
	devices   []sensors.DeviceStatus
	buffer    *buffer.Stats
	upstreams []selector.Stats
	delivered map[string]uint64
}

// serve serves the metrics package's real handler, with the components'
// collectors, over s and returns its
// address, as a gateway's metrics.listen.
func serve(t *testing.T, s *site) string {
	t.Helper()
	cs := []metrics.Collector{sensors.DeviceMetrics{Devices: func() []sensors.DeviceStatus { return s.devices }}}
	if s.buffer != nil {
		cs = append(cs,
			cardstore.Metrics{Stats: func() (buffer.Stats, bool) { return *s.buffer, true }},
			uplink.Metrics{Delivery: func() (uplink.DeliveryStats, bool) {
				var d uplink.DeliveryStats
				for _, u := range s.upstreams {
					d.Upstreams = append(d.Upstreams, uplink.UpstreamCounters{Name: u.Name, Delivered: s.delivered[u.Name]})
				}
				return d, true
			}},
			selector.Metrics{Upstreams: func() []selector.Stats { return s.upstreams }})
	}
	srv := httptest.NewServer(metrics.Handler(cs...))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestScrapeReadsTheMetricsHandler(t *testing.T) {
	s := &site{
		devices: []sensors.DeviceStatus{
			{Bus: "field-a", Name: `wind "1"`, Health: sensors.OK, Polls: 10, Errors: 2},
			{Bus: "field-a", Name: "rain-1", Health: sensors.Offline, Polls: 4, Errors: 4},
		},
		buffer:    &buffer.Stats{Appends: 8, Normal: 5, Alarms: 1},
		upstreams: []selector.Stats{{Name: "mqtt://a:1883", Up: true}, {Name: "mqtt://b:1883"}},
		delivered: map[string]uint64{"mqtt://a:1883": 3},
	}
	got, err := Scrape(context.Background(), serve(t, s))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Device{}
	for _, d := range got.Devices {
		byName[d.Name] = d
	}
	if len(got.Devices) != 2 || byName[`wind "1"`] != (Device{Bus: "field-a", Name: `wind "1"`, Polls: 10, Errors: 2, Health: "ok"}) ||
		byName["rain-1"] != (Device{Bus: "field-a", Name: "rain-1", Polls: 4, Errors: 4, Health: "offline"}) {
		t.Errorf("devices %+v", got.Devices)
	}
	if !got.Buffered || got.Appends != 8 || got.Queued != 6 {
		t.Errorf("buffer: buffered %v appends %d queued %d", got.Buffered, got.Appends, got.Queued)
	}
	if len(got.Upstreams) != 2 || got.Delivered() != 3 || strings.Join(got.Reachable(), ",") != "mqtt://a:1883" {
		t.Errorf("upstreams %+v", got.Upstreams)
	}
	if time.Since(got.Start) > time.Hour || got.Start.After(time.Now()) {
		t.Errorf("start %v: not this process's", got.Start)
	}

	s.buffer = nil // a site without an uplink
	got, err = Scrape(context.Background(), serve(t, s))
	if err != nil || got.Buffered || len(got.Upstreams) != 0 {
		t.Errorf("no uplink: %+v, %v", got, err)
	}
}

func TestScrapeSaysWhatFailed(t *testing.T) {
	addr := testtool.RefusedAddr(t) // nothing listens there
	if _, err := Scrape(context.Background(), addr); err == nil || !strings.Contains(err.Error(), addr+"/metrics") {
		t.Errorf("nothing listening: %v", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("fieldlink_device_polls_total{bus=\"b\" 3\n"))
	}))
	defer srv.Close()
	if _, err := Scrape(context.Background(), strings.TrimPrefix(srv.URL, "http://")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("garbled metrics: %v", err)
	}
}

func TestDialAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9273": "127.0.0.1:9273", ":9273": "127.0.0.1:9273", "0.0.0.0:9273": "127.0.0.1:9273",
		"[::]:9273": "[::1]:9273", "[::1]:9273": "[::1]:9273", "gw.local:9273": "gw.local:9273",
	} {
		if got := dialAddr(in); got != want {
			t.Errorf("dialAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func dev(name string, polls, errors uint64, health string) Device {
	return Device{Bus: "b", Name: name, Polls: polls, Errors: errors, Health: health}
}

func TestJudge(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	after := at.Add(time.Minute)
	reachable := &Baseline{At: at, Running: true, Reachable: true, UpstreamsUp: []string{"mqtt://a"}, Devices: 4, Answering: 4}
	offline := &Baseline{At: at, Running: true, Devices: 4, Answering: 4}
	deadSensors := &Baseline{At: at, Running: true, Devices: 4}
	notRunning := &Baseline{At: at, Error: "connection refused"}
	good := []Device{dev("w1", 5, 0, "ok"), dev("w2", 5, 1, "ok"), dev("w3", 2, 0, "ok"), dev("r1", 1, 0, "ok")}
	cannotPoll := []Device{dev("w1", 5, 5, "offline"), dev("w2", 5, 5, "offline"), dev("w3", 2, 2, "offline"), dev("r1", 1, 1, "degraded")}
	oneSilent := []Device{dev("w1", 5, 0, "ok"), dev("w2", 5, 0, "ok"), dev("w3", 2, 0, "ok"), dev("r1", 3, 3, "offline")}
	ups := func(delivered uint64, up bool) []Upstream {
		return []Upstream{{Name: "mqtt://a", Up: up, Delivered: delivered}}
	}

	for _, c := range []struct {
		name string
		s    Sample
		base *Baseline
		why  string // "" for a pass; else a part of the reason
	}{
		{"passes, delivering", Sample{Start: after, Devices: good, Buffered: true, Appends: 12, Upstreams: ups(7, true)}, reachable, ""},
		{"the old process still answers", Sample{Start: at.Add(-time.Hour), Devices: good, Buffered: true, Appends: 12, Upstreams: ups(7, true)}, reachable, "before the update began"},
		{"the same process as before the update", Sample{Start: after, Devices: good, Buffered: true, Appends: 12, Upstreams: ups(7, true)},
			&Baseline{At: at, Running: true, Started: after, Devices: 4, Answering: 4}, "the new version is not running"},
		{"cannot poll", Sample{Start: after, Devices: cannotPoll, Buffered: true, Upstreams: ups(0, true)}, reachable, "0 of 4 devices answered since the daemon started, 4 needed (4 of 4 answered before the update); not answering: b/w1 (5 polls failed)"},
		{"a device lost: more than 10 points", Sample{Start: after, Devices: oneSilent, Buffered: true, Appends: 12, Upstreams: ups(7, true)}, reachable, "3 of 4 devices answered"},
		{"not yet N cycles", Sample{Start: after, Devices: []Device{dev("w1", 2, 0, "ok"), dev("w2", 2, 0, "ok"), dev("w3", 1, 0, "ok"), dev("r1", 1, 0, "ok")}, Buffered: true, Appends: 6, Upstreams: ups(7, true)}, reachable, "2 successful polls of the busiest device, 3 cycles needed"},
		{"nothing buffered", Sample{Start: after, Devices: good, Buffered: true, Appends: 0, Upstreams: ups(7, true)}, reachable, "0 records stored in the buffer"},
		{"cannot deliver though the network was up", Sample{Start: after, Devices: good, Buffered: true, Appends: 12, Upstreams: ups(0, true)}, reachable, "nothing delivered since the daemon started (upstreams: mqtt://a up), though mqtt://a was reachable"},
		{"network down before: no delivery needed", Sample{Start: after, Devices: good, Buffered: true, Appends: 12, Upstreams: ups(0, false)}, offline, ""},
		{"network down before, cannot poll", Sample{Start: after, Devices: cannotPoll, Buffered: true, Upstreams: ups(0, false)}, offline, "0 of 4 devices answered"},
		{"no baseline: one device must answer", Sample{Start: after, Devices: cannotPoll, Buffered: true, Upstreams: ups(0, false)}, nil, "0 of 4 devices answered since the daemon started, 1 needed; not answering"},
		{"no baseline: no delivery needed", Sample{Start: after, Devices: oneSilent, Buffered: true, Appends: 12, Upstreams: ups(0, false)}, nil, ""},
		{"no daemon before: one device must answer", Sample{Start: after, Devices: oneSilent, Buffered: true, Appends: 12}, notRunning, ""},
		{"no sensor answered before: the schedule runs", Sample{Start: after, Devices: cannotPoll, Buffered: true}, deadSensors, ""},
		{"no sensor answered before: nothing polled yet", Sample{Start: after, Devices: []Device{dev("w1", 1, 1, "offline")}, Buffered: true}, deadSensors, "1 poll since the daemon started, 3 needed"},
		{"no uplink: no buffer to check", Sample{Start: after, Devices: good}, nil, ""},
		{"no devices", Sample{Start: after}, nil, "no devices"},
	} {
		t.Run(c.name, func(t *testing.T) {
			why, summary := Judge(c.s, c.base, DefaultCriteria)
			if c.why == "" && why != "" {
				t.Errorf("does not pass: %s", why)
			}
			if c.why != "" && !strings.Contains(why, c.why) {
				t.Errorf("reason %q, want it to contain %q", why, c.why)
			}
			if (why == "") == (summary == "") {
				t.Errorf("reason %q and summary %q: want exactly one", why, summary)
			}
		})
	}
}

func TestRequired(t *testing.T) {
	for _, c := range []struct {
		answering, devices, now int
		want                    int
	}{
		{6, 6, 6, 6},    // 100% - 10 points of 6 = 5.4: all 6
		{10, 10, 10, 9}, // 90% of 10
		{9, 10, 10, 8},  // 80% of 10
		{1, 20, 20, 1},  // never below one
		{3, 4, 8, 6},    // shares, not counts: the site grew
	} {
		base := &Baseline{Running: true, Devices: c.devices, Answering: c.answering}
		if got := required(base, c.now, 0.10); got != c.want {
			t.Errorf("%d of %d answering before, %d devices now: required %d, want %d", c.answering, c.devices, c.now, got, c.want)
		}
	}
}

func TestBaselineFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db.update.json")
	if b, err := ReadBaseline(path); b != nil || err != nil {
		t.Fatalf("no file: %v, %v", b, err)
	}
	s := Sample{Devices: []Device{dev("w1", 3, 0, "ok"), dev("r1", 3, 3, "offline")}, Upstreams: ups2()}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	want := NewBaseline(&s, nil, at, "1.2.0")
	if err := WriteBaseline(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadBaseline(path)
	if err != nil || got == nil {
		t.Fatalf("read back: %v, %v", got, err)
	}
	if got.String() != want.String() || !got.Reachable || got.Answering != 1 || got.Devices != 2 || got.Version != "1.2.0" {
		t.Errorf("read back %+v, want %+v", *got, want)
	}
	if s := got.String(); !strings.Contains(s, "1 of 2 devices answering, upstream reachable: mqtt://b") {
		t.Errorf("String() = %q", s)
	}
	down := NewBaseline(nil, context.DeadlineExceeded, at, "1.2.0")
	if down.Running || !strings.Contains(down.String(), "no daemon answered") {
		t.Errorf("no daemon: %+v", down)
	}
}

func ups2() []Upstream {
	return []Upstream{{Name: "mqtt://a"}, {Name: "mqtt://b", Up: true}}
}

// With allow_remote and scrape_token the gate sends the token of
// metrics.token_file (relative to the site file, by default beside the
// buffer); a token file it cannot read is an error that says what to do,
// unless the listener is on loopback, where no token is asked.
func TestSiteTarget(t *testing.T) {
	const token = "0123456789abcdef-token"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("fieldlink_device_polls_total{bus=\"b\",device=\"d\"} 3\n"))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	write := func(name, data string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("data/status-token", token+"\n")
	write("other-token", token+"\n")
	for name, metrics := range map[string]string{
		"default token file": fmt.Sprintf("{listen: %q, allow_remote: true, scrape_token: true}", addr),
		"token_file":         fmt.Sprintf("{listen: %q, allow_remote: true, scrape_token: true, token_file: other-token}", addr),
	} {
		s, err := ReadSettings(write("site.yaml", "metrics: "+metrics+"\nbuffer: {path: data/buf.db}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if s.Buffer.Path != filepath.Join(dir, "data/buf.db") {
			t.Errorf("%s: buffer path %s, want it relative to the site file", name, s.Buffer.Path)
		}
		target, err := s.Target()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := target.Scrape(context.Background())
		if err != nil || len(got.Devices) != 1 || got.Devices[0].Polls != 3 {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
	}

	// Without scrape_token, no token is read or sent: the daemon asks for
	// none on /metrics.
	s, _ := ReadSettings(write("site.yaml", fmt.Sprintf("metrics: {listen: %q, allow_remote: true}\n", addr)))
	if target, err := s.Target(); err != nil || target.Token != "" {
		t.Errorf("without scrape_token: %+v, %v", target, err)
	} else if _, err := target.Scrape(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a scrape the daemon refuses: %v", err)
	}

	// A token file the gate cannot read (here a directory): on a LAN
	// address, an error naming the option and what to do.
	s, _ = ReadSettings(write("site.yaml", "metrics: {listen: \"192.0.2.1:9273\", allow_remote: true, scrape_token: true, token_file: data}\n"))
	if _, err := s.Target(); err == nil || !strings.Contains(err.Error(), "metrics.scrape_token") || !strings.Contains(err.Error(), "as root") {
		t.Errorf("unreadable token on a LAN address: %v", err)
	}
	s, _ = ReadSettings(write("site.yaml", "metrics: {listen: \"0.0.0.0:9273\", allow_remote: true, scrape_token: true, token_file: data}\n"))
	if _, err := s.Target(); err != nil {
		t.Errorf("unreadable token, every interface (reached on loopback): %v", err)
	}
}
