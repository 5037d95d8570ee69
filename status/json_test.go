package status_test

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"fieldlink/agent"
	"fieldlink/config"
	"fieldlink/internal/testtool"
	"fieldlink/sensors"
)

// doc is /status.json as the README documents it, decoded apart from the
// package's own types so that a renamed field shows.
type doc struct {
	Generated time.Time `json:"generated"`
	Site      struct {
		ID      string `json:"id"`
		Gateway string `json:"gateway"`
		Version string `json:"version"`
		Config  struct {
			File    string `json:"file"`
			SHA256  string `json:"sha256"`
			Changed bool   `json:"changed"`
		} `json:"config"`
	} `json:"site"`
	Clock struct {
		Synchronised *bool `json:"synchronised"`
	} `json:"clock"`
	Buses []struct {
		Name     string `json:"name"`
		State    string `json:"state"`
		Requests uint64 `json:"requests"`
		Errors   struct {
			Timeout, CRC, Exception, Framing, IO uint64
		} `json:"errors"`
		Utilisation *float64 `json:"utilisation"`
		Cause       string   `json:"cause"`
	} `json:"buses"`
	Devices []struct {
		Name     string     `json:"name"`
		Bus      string     `json:"bus"`
		Health   string     `json:"health"`
		Why      string     `json:"why"`
		Failures int        `json:"failures_in_row"`
		Polls    uint64     `json:"polls"`
		LastOK   *time.Time `json:"last_ok"`
		Points   []struct {
			Name      string   `json:"name"`
			Unit      string   `json:"unit"`
			Value     *string  `json:"value"`
			Quality   string   `json:"quality"`
			Age       *float64 `json:"age_s"`
			LastValue *string  `json:"last_value"`
			Raw       string   `json:"raw"`
		} `json:"points"`
	} `json:"devices"`
	Buffer *struct {
		Waiting  int     `json:"waiting"`
		DiskFree *uint64 `json:"disk_free"`
	} `json:"buffer"`
	Uplink *struct {
		Selector  string `json:"selector"`
		Upstreams []struct {
			Name      string  `json:"name"`
			State     string  `json:"state"`
			LastError *string `json:"last_error"`
		} `json:"upstreams"`
	} `json:"uplink"`
	Downlink json.RawMessage `json:"downlink"`
}

// serveStatus starts a gateway on c and serves its status pages, both
// stopped when the test ends.
func serveStatus(t *testing.T, c *config.Config) *httptest.Server {
	t.Helper()
	g, err := agent.Start(c, agent.Options{Logger: testtool.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Stop() })
	srv := httptest.NewServer(agent.MetricsHandler(c, g.Sources(), testtool.Logger(t)))
	t.Cleanup(srv.Close)
	return srv
}

func fetchDoc(t *testing.T, url string) *doc {
	t.Helper()
	code, body := testtool.HTTPGet(t, url+"/status.json")
	if code != http.StatusOK {
		t.Fatalf("/status.json: %d\n%s", code, body)
	}
	testtool.ValidStatus(t, []byte(body))
	var d doc
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	return &d
}

// check holds for every snapshot, whatever the moment: a point has a value
// exactly while it is good, and a device's health follows its failures in
// a row (offline from the third).
func check(t *testing.T, d *doc) {
	t.Helper()
	for _, dev := range d.Devices {
		want := "ok"
		switch {
		case dev.Polls == 0:
			want = "unknown"
		case dev.Failures >= 3:
			want = "offline"
		case dev.Failures > 0:
			want = "degraded"
		}
		if dev.Health != want {
			t.Errorf("%s: health %s with %d failures in a row after %d polls, want %s", dev.Name, dev.Health, dev.Failures, dev.Polls, want)
		}
		for _, p := range dev.Points {
			if (p.Value != nil) != (p.Quality == "good") {
				t.Errorf("%s/%s: quality %s with value %v: a value only while good", dev.Name, p.Name, p.Quality, deref(p.Value))
			}
			if dev.Health != "ok" && p.Quality == "good" {
				t.Errorf("%s/%s: good while the device is %s", dev.Name, p.Name, dev.Health)
			}
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// The JSON over a running agent against the emulator: a device whose
// emulator stops goes offline at its third failed poll, its points go
// stale then bad and never show a value; the device on the other bus stays
// ok; when the emulator returns, the device and its points come back.
func TestJSONDeviceOfflineAndBack(t *testing.T) {
	ea, eb := newEmu(t, "generic-mine-methane"), newEmu(t, "generic-wind-speed")
	ingest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ingest.Close) // closed after the gateway stops
	srv := serveStatus(t, writeSite(t, twoBuses(ea.addr, eb.addr, ingest.URL, "off")))

	var last *doc
	observe := func() *doc {
		last = fetchDoc(t, srv.URL)
		check(t, last)
		if t.Failed() {
			t.FailNow()
		}
		return last
	}
	device := func(d *doc, name string) int {
		for i, dev := range d.Devices {
			if dev.Name == name {
				return i
			}
		}
		t.Fatalf("no device %s in %+v", name, d.Devices)
		return -1
	}
	allGood := func(d *doc, name string) bool {
		dev := d.Devices[device(d, name)]
		for _, p := range dev.Points {
			if p.Quality != "good" {
				return false
			}
		}
		return dev.Health == "ok" && len(dev.Points) > 0
	}
	testtool.WaitFor(t, 20*time.Second, "both devices ok with good points", func() bool {
		d := observe()
		return allGood(d, "ch4-1") && allGood(d, "wind-1")
	})
	if d := last; d.Site.ID != "M9" || d.Site.Gateway != "gw-status" || len(d.Site.Config.SHA256) != 64 || d.Site.Config.Changed ||
		d.Buffer == nil || d.Buffer.DiskFree == nil || d.Uplink == nil || d.Uplink.Selector == "" || len(d.Uplink.Upstreams) != 1 ||
		!strings.Contains(string(d.Downlink), `"enabled": false`) || len(d.Buses) != 2 || d.Buses[0].Name != "a" || d.Buses[1].State != "ok" {
		t.Fatalf("snapshot of a healthy site: %+v", d)
	}
	for _, p := range last.Devices[device(last, "wind-1")].Points {
		if p.Raw == "" || p.Age == nil {
			t.Errorf("wind-1/%s: good point without raw registers or age: %+v", p.Name, p)
		}
	}

	// Polls counted from after the stop: a snapshot taken before it
	// misses good polls that ran in between on a busy machine.
	eb.stop()
	stopped := observe().Devices[device(last, "wind-1")].Polls
	sawStale := false
	testtool.WaitFor(t, 30*time.Second, "wind-1 offline", func() bool {
		d := observe()
		dev := d.Devices[device(d, "wind-1")]
		if dev.Health == "degraded" {
			for _, p := range dev.Points {
				sawStale = sawStale || p.Quality == "stale"
			}
		}
		return dev.Health == "offline"
	})
	dev := last.Devices[device(last, "wind-1")]
	// Every poll since the stop failed but, at most, one already on the
	// wire: offline at the third.
	if dev.Failures < 3 || dev.Polls-stopped > uint64(dev.Failures)+1 {
		t.Errorf("wind-1 offline with %d failures in a row after %d polls since its emulator stopped", dev.Failures, dev.Polls-stopped)
	}
	if dev.Why == "" || dev.LastOK == nil {
		t.Errorf("offline wind-1 says no why (%q) or no last good time", dev.Why)
	}
	for _, p := range dev.Points {
		if p.Quality != "bad" || p.Value != nil || p.LastValue == nil {
			t.Errorf("wind-1/%s while offline: quality %s value %s last %s; want bad, null, the last reading", p.Name, p.Quality, deref(p.Value), deref(p.LastValue))
		}
	}
	if !allGood(last, "ch4-1") {
		t.Errorf("ch4-1 on the other bus: %+v", last.Devices[device(last, "ch4-1")])
	}
	b := last.Buses[1]
	if b.State != "down" || b.Errors.IO+b.Errors.Timeout == 0 {
		t.Errorf("bus b with its only device offline: state %s, errors %+v", b.State, b.Errors)
	}
	t.Logf("stale seen while degraded: %v", sawStale)
	if !strings.Contains(b.Cause, "refuses connections") {
		t.Errorf("bus b down, its emulator gone: cause %q", b.Cause)
	}

	// The page says the same: the device offline, its points without a
	// number.
	code, page := testtool.HTTPGet(t, srv.URL+"/")
	if code != 200 || !strings.Contains(page, `data-device="wind-1" data-health="offline"`) || !strings.Contains(page, `data-device="ch4-1" data-health="ok"`) {
		t.Fatalf("page: %d\n%s", code, page)
	}
	checkNoNumberUnlessGood(t, page)
	if n := strings.Count(page, "refuses connections"); n != 1 {
		t.Errorf("bus b's cause shows %d times on the page, want once", n)
	}

	eb.start()
	testtool.WaitFor(t, 30*time.Second, "wind-1 back with good points", func() bool {
		return allGood(observe(), "wind-1")
	})
	for _, p := range last.Devices[device(last, "wind-1")].Points {
		if p.Value == nil || p.LastValue != nil {
			t.Errorf("wind-1/%s after recovery: value %s, last_value %s", p.Name, deref(p.Value), deref(p.LastValue))
		}
	}
}

var (
	rowRE   = regexp.MustCompile(`<tr class="q-(\w+)[^"]*" data-point="[^"]*" data-quality="\w+"><th><span class=name>[^<]*</span></th><td class=v>(.*?)</td>`)
	digitRE = regexp.MustCompile(`[0-9]`)
)

// checkNoNumberUnlessGood fails if a point that is not good shows anything
// but its quality in the value's cell.
func checkNoNumberUnlessGood(t *testing.T, page string) {
	t.Helper()
	rows := rowRE.FindAllStringSubmatch(page, -1)
	if len(rows) == 0 {
		t.Fatalf("no point rows in the page:\n%s", page)
	}
	for _, r := range rows {
		if r[1] != "good" && (digitRE.MatchString(r[2]) || !strings.HasPrefix(r[2], "<i")) {
			t.Errorf("a %s point shows %q", r[1], r[2])
		}
	}
}

// BenchmarkStatusJSONAgent50Devices is a /status.json scrape of a running
// agent polling 50 emulated devices (five profiles, ten of each) every
// second (4.6 points a device), with a buffer and an HTTP upstream: the real snapshot functions,
// their locks and the buffer's read transaction included.
func BenchmarkStatusJSONAgent50Devices(b *testing.B) {
	kinds := []string{"generic-mine-multigas", "jxct-jxbs-3001-tr", "sensecap-s-soil-mtec-02", "elt-mb-350u-c", "generic-tipping-bucket-rain"}
	var names []string
	var devs strings.Builder
	for i := range 50 {
		names = append(names, kinds[i%len(kinds)])
		fmt.Fprintf(&devs, "      - {name: dev-%02d, profile: %s, slave: %d, interval: 1s}\n", i+1, kinds[i%len(kinds)], i+1)
	}
	e := newEmu(b, names...)
	ingest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ingest.Close()
	c := writeSite(b, fmt.Sprintf(`site: {id: "M50"}
gateway: {id: gw-50}
buffer: {path: buf.db}
metrics: {listen: "off"}
buses:
  - name: a
    url: tcp://%s
    devices:
%suplink:
  upstreams:
    - url: %s/ingest
`, e.addr, devs.String(), ingest.URL))
	g, err := agent.Start(c, agent.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Stop()
	h := agent.MetricsHandler(c, g.Sources(), nil)
	testtool.WaitFor(b, 60*time.Second, "50 devices ok", func() bool {
		ok := 0
		for _, d := range g.Sensors().Status() {
			if d.Health == sensors.OK {
				ok++
			}
		}
		return ok == 50
	})
	r := httptest.NewRequest(http.MethodGet, "/status.json", nil)
	r.RemoteAddr = "127.0.0.1:1"
	var n int
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("/status.json: %d", w.Code)
		}
		n = w.Body.Len()
	}
	b.ReportMetric(float64(n), "bytes/op")
}

// The only upstream refuses connections: its row in the JSON says so in
// words, where it said "failures": 0 and nothing else.
func TestJSONUpstreamDownSaysWhy(t *testing.T) {
	ea, eb := newEmu(t, "generic-mine-methane"), newEmu(t, "generic-wind-speed")
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens at its address now
	srv := serveStatus(t, writeSite(t, twoBuses(ea.addr, eb.addr, closed.URL, "off")))
	var last *doc
	testtool.WaitFor(t, 20*time.Second, "the upstream down with its last error", func() bool {
		last = fetchDoc(t, srv.URL)
		return last.Uplink != nil && len(last.Uplink.Upstreams) == 1 && last.Uplink.Upstreams[0].LastError != nil && last.Uplink.Upstreams[0].State == "down"
	})
	up := last.Uplink.Upstreams[0]
	if up.State != "down" || !strings.Contains(*up.LastError, "connection refused: nothing listens at") {
		t.Errorf("the upstream refusing connections: %s, %q", up.State, *up.LastError)
	}
}

// Two gateways installed from one image, with the same gateway.id, on one
// real mosquitto: each knocks the other off (one MQTT client id). Their
// /status.json says so in words in the upstream's last error, and the
// page among the warnings above everything.
func TestTwoGatewaysOneIDSaySo(t *testing.T) {
	broker := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	bin := testtool.BuildGateway(t)
	e := newEmu(t, "generic-mine-methane")
	var urls []string
	for range 2 {
		c := writeSite(t, testtool.SiteFile{
			Site: `{id: "M9"}`, Gateway: "gw-cloned", Buffer: "buf.db", Metrics: "127.0.0.1:0", Bus: "tcp://" + e.addr,
			Devices: []string{"{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 500ms}"},
			Uplink:  []string{"upstreams: [{url: " + broker.URL() + "}]"},
		}.String())
		gwLog, _ := runGateway(t, bin, c.File)
		urls = append(urls, "http://"+testtool.MetricsAddr(t, gwLog.String))
	}
	const words = "another client uses this gateway's MQTT client id (fieldlink-gw-cloned-1)"
	for _, u := range urls {
		testtool.WaitFor(t, 60*time.Second, u+" to say another client uses its id", func() bool {
			resp, err := http.Get(u + "/status.json")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var d doc
			if json.NewDecoder(resp.Body).Decode(&d) != nil || d.Uplink == nil || len(d.Uplink.Upstreams) != 1 {
				return false
			}
			le := d.Uplink.Upstreams[0].LastError
			return le != nil && strings.HasPrefix(*le, words)
		})
	}
	_, page := testtool.HTTPGet(t, urls[0]+"/")
	i, j := strings.Index(page, "id=alerts"), strings.Index(page, "id=summary")
	if i < 0 || i > j || !strings.Contains(page[i:j], html.EscapeString(words)) {
		t.Errorf("the page's warnings do not say another client uses the id:\n%.3000s", page)
	}
}
